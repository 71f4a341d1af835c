// W3C trace context through a real spoold, with the OpenTelemetry SDK's
// in-memory exporter as this process's global provider and the
// AsyncLocalStorage context manager (what an app's SDK setup registers):
// publishing inside a span carries its context; the handler's span, in
// stream and in callback mode, has the publisher's trace id and span as
// parent; a publish from the handler continues the trace; an app's own
// traceparent is kept.
import { strict as assert } from "node:assert";
import { after, before, test } from "node:test";

import { SpanKind, SpanStatusCode, context, trace, type Span, type SpanContext } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from "@opentelemetry/sdk-trace-base";

import { Client, DeadLetter, serveHandler, type Message } from "@spoolmq/spool";
import { Node, eventually, freePort } from "./harness";

const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
const contextManager = new AsyncLocalStorageContextManager();

before(() => {
  context.setGlobalContextManager(contextManager.enable());
  trace.setGlobalTracerProvider(provider);
});

after(async () => {
  await provider.shutdown();
  contextManager.disable();
});

const OWN = "00-11111111111111111111111111111111-2222222222222222-01";

/** The finished span with this span context, awaited (the SDK exports it when the handler's settlement is decided). */
async function finished(sc: SpanContext): Promise<ReadableSpan> {
  let s: ReadableSpan | undefined;
  await eventually(`span ${sc.spanId} exported`, () => (s = exporter.getFinishedSpans().find((x) => x.spanContext().spanId === sc.spanId)) !== undefined);
  return s!;
}

/** Checks that the handler's span (current while it ran) is a consumer span, child of parent. */
async function checkHandlerSpan(got: SpanContext | undefined, parent: SpanContext, topic = "orders"): Promise<ReadableSpan> {
  assert.ok(got, "no span was current in the handler");
  const s = await finished(got);
  assert.equal(s.spanContext().traceId, parent.traceId, "the handler's span is in another trace than the publisher's");
  assert.equal(s.parentSpanContext?.spanId, parent.spanId, "its parent is not the publisher's span");
  assert.equal(s.parentSpanContext?.isRemote, true);
  assert.equal(s.name, `${topic} process`);
  assert.equal(s.kind, SpanKind.CONSUMER);
  const a = s.attributes;
  assert.equal(a["messaging.system"], "spool");
  assert.equal(a["messaging.operation.type"], "process");
  assert.equal(a["messaging.destination.name"], topic);
  assert.equal(typeof a["messaging.destination.partition.id"], "string");
  assert.ok(a["messaging.message.id"]);
  assert.equal(a["messaging.spool.attempt"], 1);
  assert.equal(typeof a["messaging.spool.offset"], "number");
  return s;
}

test("stream mode: publish, batch and publisher carry the caller's span; the handler's span continues it", async () => {
  const n = await Node.start(`
topics:
  - name: orders
    partitions: 2
  - name: receipts
    partitions: 1
subscriptions:
  - topic: orders
    group: workers
    max_attempts: 1
  - topic: receipts
    group: workers
`);
  const c = await Client.connect(n.app);
  const handled = new Map<string, SpanContext | undefined>();
  const headers = new Map<string, Readonly<Record<string, string>>>();
  const ac = new AbortController();
  try {
    const tracer = trace.getTracer("checkout");
    const appHeaders = { schema: "v2" };
    const ownCase = { TraceParent: OWN };
    let parent!: Span;
    await tracer.startActiveSpan("checkout", async (span) => {
      parent = span;
      await c.publish("orders", { key: "k", payload: "traced", headers: appHeaders });
      await c.publish("orders", { key: "k", payload: "own", headers: { traceparent: OWN } });
      await c.publish("orders", { key: "k", payload: "own-case", headers: ownCase });
      await c.publishBatch("orders", [{ key: "k", payload: "batch" }, { key: "k", payload: "hop" }, { key: "k", payload: "poison" }]);
      const p = c.publisher("orders");
      await (await p.publish({ key: "k", payload: "piped" })).result;
      await p.close();
      span.end();
    });
    assert.deepEqual(appHeaders, { schema: "v2" }, "publish changed the caller's headers");
    assert.deepEqual(ownCase, { TraceParent: OWN });
    await c.publish("orders", { key: "k", payload: "rootless" }); // outside any span

    const done = c.subscribe({
      group: "workers", topics: ["orders", "receipts"], signal: ac.signal, shutdownSignals: [],
      handler: async (m: Message) => {
        const sc = trace.getSpanContext(context.active());
        const body = m.payload.toString();
        if (m.topic === "receipts") {
          handled.set(`receipt of ${body}`, sc);
          return;
        }
        headers.set(body, m.headers);
        if (body === "hop") {
          // Publishing from the handler continues the trace.
          await c.publish("receipts", { payload: body });
        }
        handled.set(body, sc);
        if (body === "poison") throw new DeadLetter("bad-schema");
      },
    });
    await eventually("eight messages and the receipt handled", () => handled.size === 9);
    ac.abort();
    await done;

    const psc = parent.spanContext();
    const traced = await checkHandlerSpan(handled.get("traced"), psc);
    assert.equal(traced.attributes["messaging.spool.outcome"], "ack");
    assert.equal(traced.attributes["messaging.consumer.group.name"], "workers");
    assert.equal(traced.status.code, SpanStatusCode.UNSET);
    await checkHandlerSpan(handled.get("batch"), psc);
    await checkHandlerSpan(handled.get("piped"), psc);
    const poison = await checkHandlerSpan(handled.get("poison"), psc);
    assert.equal(poison.attributes["messaging.spool.outcome"], "dead_letter");
    assert.equal(poison.status.code, SpanStatusCode.ERROR);
    const hop = await checkHandlerSpan(handled.get("hop"), psc);
    await checkHandlerSpan(handled.get("receipt of hop"), hop.spanContext(), "receipts");
    assert.equal(headers.get("traced")?.schema, "v2");
    assert.equal(headers.get("traced")?.traceparent, `00-${psc.traceId}-${psc.spanId}-01`);
    assert.equal(headers.get("own")?.traceparent, OWN, "the app's own traceparent was overwritten");
    assert.equal(handled.get("own")?.traceId, "11111111111111111111111111111111");
    assert.deepEqual(headers.get("own-case"), { TraceParent: OWN }, "a TraceParent header the app set was overwritten or doubled");
    const rootless = await finished(handled.get("rootless")!);
    assert.equal(rootless.parentSpanContext, undefined, "a message without traceparent got a parent");
    assert.notEqual(rootless.spanContext().traceId, psc.traceId);
  } finally {
    ac.abort();
    c.close();
    await n.kill();
  }
});

test("callback mode: the handler's span continues the publisher's", async () => {
  const port = await freePort();
  let got: SpanContext | undefined;
  const ac = new AbortController();
  const srv = await serveHandler({
    address: `127.0.0.1:${port}`, signal: ac.signal, shutdownSignals: [],
    handler: () => {
      got = trace.getSpanContext(context.active());
    },
  });
  const n = await Node.start(`
topics:
  - name: orders
    partitions: 2
subscriptions:
  - topic: orders
    group: mailer
    delivery: callback
    app_address: "127.0.0.1:${port}"
`);
  const c = await Client.connect(n.app);
  try {
    let parent!: SpanContext;
    await trace.getTracer("checkout").startActiveSpan("checkout", async (span) => {
      parent = span.spanContext();
      await c.publishBatch("orders", [{ key: "k", payload: "traced" }]);
      span.end();
    });
    await eventually("handled by the callback", () => got !== undefined);
    const s = await checkHandlerSpan(got, parent);
    assert.equal(s.attributes["messaging.consumer.group.name"], "mailer");
    assert.equal(s.attributes["messaging.spool.outcome"], "ack");
  } finally {
    c.close();
    await n.kill();
    ac.abort();
    await srv.closed;
  }
});
