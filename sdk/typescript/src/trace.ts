// Trace context through messages (docs/protocol.md, "Trace context"): a
// publish carries the caller's W3C trace context in the message headers
// `traceparent` and `tracestate`, and each handler runs in a consumer span
// `<topic> process` continued from them.
//
// Only @opentelemetry/api is used. Without an OpenTelemetry SDK the tracer is
// the API's no-op: a handler's span is a non-recording span carrying the
// message's context, and no attribute is computed. The API has no W3C
// propagator (that lives in @opentelemetry/core, an SDK package), so the
// traceparent format is written and parsed here, strictly per the W3C Trace
// Context spec; the tracestate list is parsed by the API's createTraceState.
// The propagator is always W3C, whatever global propagator the app set, so
// that every Spool SDK reads what the others write.
import {
  ROOT_CONTEXT, SpanKind, SpanStatusCode, context, createTraceState, trace,
  type Context, type Span, type SpanContext, type Tracer, type TracerProvider,
} from "@opentelemetry/api";

import type { Message } from "./message";
import type { OutcomeName, Settlement } from "./outcome";

/** Header holding the W3C traceparent of a message. */
export const HEADER_TRACEPARENT = "traceparent";
/** Header holding the W3C tracestate of a message. */
export const HEADER_TRACESTATE = "tracestate";

/** The instrumentation scope of the SDK's spans. */
const TRACER_NAME = "@spoolmq/spool";

// The flags carried: sampled and (W3C level 2) random, as Go's propagator does.
const KNOWN_FLAGS = 0x01 | 0x02;
const ZERO_TRACE_ID = "00000000000000000000000000000000";
const ZERO_SPAN_ID = "0000000000000000";
const LOWER_HEX_TRACE_ID = /^[0-9a-f]{32}$/;
const LOWER_HEX_SPAN_ID = /^[0-9a-f]{16}$/;

/** Whether s[from, to) is lowercase hex. */
function lowerHex(s: string, from: number, to: number): boolean {
  for (let i = from; i < to; i++) {
    const c = s.charCodeAt(i);
    if (!((c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x66))) return false;
  }
  return true;
}

/**
 * Parses a traceparent header (W3C Trace Context, version 00: "00-" 32 hex
 * digits of trace id "-" 16 of parent id "-" 2 of flags). Returns the remote
 * span context it names, or undefined when it is malformed: not lowercase
 * hex, a wrong length or separator, version ff, an all-zero trace id or
 * parent id. A higher version is read as the spec says: its first four
 * fields, and whatever follows a "-" after them is ignored. Only the sampled
 * and random flags are kept (unknown flags are ignored, as the spec says).
 */
export function parseTraceparent(s: string): SpanContext | undefined {
  if (s.length < 55 || s[2] !== "-" || s[35] !== "-" || s[52] !== "-") return undefined;
  if (!lowerHex(s, 0, 2) || !lowerHex(s, 3, 35) || !lowerHex(s, 36, 52) || !lowerHex(s, 53, 55)) return undefined;
  const version = s.slice(0, 2);
  if (version === "ff") return undefined;
  if (s.length > 55 && (version === "00" || s[55] !== "-")) return undefined; // version 00 is exactly 55 characters
  const traceId = s.slice(3, 35);
  const spanId = s.slice(36, 52);
  if (traceId === ZERO_TRACE_ID || spanId === ZERO_SPAN_ID) return undefined;
  return { traceId, spanId, traceFlags: parseInt(s.slice(53, 55), 16) & KNOWN_FLAGS, isRemote: true };
}

/** Formats a span context as a version 00 traceparent, or undefined when it is not valid. */
export function formatTraceparent(sc: SpanContext): string | undefined {
  const traceId = sc.traceId.toLowerCase();
  const spanId = sc.spanId.toLowerCase();
  if (!LOWER_HEX_TRACE_ID.test(traceId) || traceId === ZERO_TRACE_ID) return undefined;
  if (!LOWER_HEX_SPAN_ID.test(spanId) || spanId === ZERO_SPAN_ID) return undefined;
  return `00-${traceId}-${spanId}-0${sc.traceFlags & KNOWN_FLAGS}`;
}

/**
 * Returns headers with the trace context of ctx (default: the active one)
 * added. The caller's object is never changed: a copy is made only when
 * something is added. Nothing is added when ctx has no valid span, or when
 * the headers already have a traceparent (in any case): a header the
 * application set itself wins.
 */
export function injectTrace(headers: Record<string, string> | undefined, ctx: Context = context.active()): Record<string, string> | undefined {
  const sc = trace.getSpanContext(ctx);
  if (sc === undefined) return headers;
  const tp = formatTraceparent(sc);
  if (tp === undefined || hasTraceparent(headers)) return headers;
  const out: Record<string, string> = { ...headers, [HEADER_TRACEPARENT]: tp };
  const ts = sc.traceState?.serialize();
  if (ts) out[HEADER_TRACESTATE] = ts;
  return out;
}

function hasTraceparent(h: Record<string, string> | undefined): boolean {
  if (!h) return false;
  if (Object.prototype.hasOwnProperty.call(h, HEADER_TRACEPARENT)) return true;
  for (const k of Object.keys(h)) if (k.toLowerCase() === HEADER_TRACEPARENT) return true;
  return false;
}

/**
 * The context a message's headers carry: the root context with the remote
 * span context of its traceparent (and tracestate), or the root context
 * alone when it has none or a malformed one.
 */
export function extractTrace(headers: Readonly<Record<string, string>>): Context {
  const tp = headers[HEADER_TRACEPARENT];
  if (!tp) return ROOT_CONTEXT;
  const sc = parseTraceparent(tp);
  if (!sc) return ROOT_CONTEXT;
  const ts = headers[HEADER_TRACESTATE];
  if (ts) sc.traceState = createTraceState(ts);
  return trace.setSpanContext(ROOT_CONTEXT, sc);
}

const OUTCOMES: Record<OutcomeName, string> = {
  OUTCOME_ACK: "ack",
  OUTCOME_RETRY: "retry",
  OUTCOME_DEAD_LETTER: "dead_letter",
  OUTCOME_RELEASE: "release",
};

/**
 * Starts the span each handler runs in, from the given provider or (by
 * default) the global one, which follows a provider registered later.
 */
export class HandlerTracer {
  private readonly tracer: Tracer;

  constructor(tp?: TracerProvider) {
    this.tracer = (tp ?? trace.getTracerProvider()).getTracer(TRACER_NAME);
  }

  /**
   * Begins m's span: a child of the message's trace context when it carries
   * one, else a new root (never a child of whatever was active when the
   * subscription started). Returns the span and the context to run the
   * handler in.
   */
  start(m: Message): { span: Span; ctx: Context } {
    const parent = extractTrace(m.headers);
    const span = this.tracer.startSpan(`${m.topic} process`, { kind: SpanKind.CONSUMER, root: parent === ROOT_CONTEXT }, parent);
    if (span.isRecording()) {
      span.setAttributes({
        "messaging.system": "spool",
        "messaging.operation.type": "process",
        "messaging.destination.name": m.topic,
        "messaging.destination.partition.id": String(m.partition),
        "messaging.consumer.group.name": m.group,
        "messaging.message.id": m.id,
        "messaging.spool.attempt": m.attempt,
        "messaging.spool.offset": Number(m.offset),
      });
    }
    return { span, ctx: trace.setSpan(parent, span) };
  }

  /** Records the handler's outcome (retry and dead_letter are errors) and ends the span. */
  end(span: Span, st: Settlement): void {
    if (span.isRecording()) {
      const name = OUTCOMES[st.outcome];
      span.setAttribute("messaging.spool.outcome", name);
      if (name === "retry" || name === "dead_letter") span.setStatus({ code: SpanStatusCode.ERROR, message: st.error || st.reason });
    }
    span.end();
  }

  /** Runs handler(m) in m's span; resolves or rejects as the handler does, with the span ended by settle's outcome. */
  async run(m: Message, handler: () => Promise<void> | void, settle: (thrown: unknown, ok: boolean) => Settlement): Promise<Settlement> {
    const { span, ctx } = this.start(m);
    let st: Settlement;
    try {
      await context.with(ctx, handler);
      st = settle(undefined, true);
    } catch (e) {
      st = settle(e, false);
    }
    this.end(span, st);
    return st;
  }
}
