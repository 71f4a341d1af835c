// Publishing against a real spoold: batches with ids, the streaming
// publisher, acks, and the sidecar's refusals as typed errors.
import { strict as assert } from "node:assert";
import { after, before, describe, test } from "node:test";

import { Client, InvalidRequestError, NotFoundError, Reason, SidecarUnreachableError, SpoolError } from "@spoolmq/spool";
import { Node, freePort } from "./harness";

describe("publish", () => {
  let n: Node;
  let c: Client;
  before(async () => {
    n = await Node.start(`
limits:
  max_message_bytes: 65536
topics:
  - name: orders
    partitions: 4
subscriptions:
  - topic: orders
    group: workers
`);
    c = await Client.connect(n.app);
  });
  after(async () => {
    c.close();
    await n.kill();
  });

  test("batch with ids, keys and headers; results in order", async () => {
    const rs = await c.publishBatch("orders", [
      { id: "a-1", key: "k", payload: "one", headers: { schema: "v2" } },
      { id: "a-2", key: "k", payload: Buffer.from("two") },
      { key: "k", payload: new Uint8Array([1, 2, 3]) },
    ]);
    assert.equal(rs.length, 3);
    assert.equal(rs[0]!.id, "a-1");
    assert.equal(rs[1]!.id, "a-2");
    assert.match(rs[2]!.id, /^[0-9a-f-]{36}$/, "the sidecar generates an id");
    assert.equal(rs[0]!.partition, rs[1]!.partition, "same key, same partition");
    assert.equal(rs[1]!.offset, rs[0]!.offset + 1n);
    const one = await c.publish("orders", { id: "single", payload: "x" }, { acks: "leader" });
    assert.equal(one.id, "single");
  });

  test("unknown topic is a NotFoundError with reason UNKNOWN_TOPIC", async () => {
    const err = await c.publish("no-such-topic", { payload: "x" }).then(() => undefined, (e: unknown) => e);
    assert.ok(err instanceof NotFoundError, `got ${String(err)}`);
    assert.equal(err.reason, Reason.UNKNOWN_TOPIC);
    assert.equal(err.retryable, false);
    assert.match(err.message, /no-such-topic/);
    assert.match(err.message, /UNKNOWN_TOPIC/);
  });

  test("oversize message is an InvalidRequestError with reason MESSAGE_TOO_LARGE", async () => {
    const err = await c.publish("orders", { payload: Buffer.alloc(100_000) }).then(() => undefined, (e: unknown) => e);
    assert.ok(err instanceof InvalidRequestError, `got ${String(err)}`);
    assert.equal(err.reason, Reason.MESSAGE_TOO_LARGE);
    assert.ok(err.details.length > 0);
  });

  test("reserved header in a batch names the message", async () => {
    const err = await c.publishBatch("orders", [{ payload: "ok" }, { payload: "x", headers: { "spool-x": "1" } }]).then(() => undefined, (e: unknown) => e);
    assert.ok(err instanceof SpoolError);
    assert.equal(err.reason, Reason.RESERVED_HEADER);
    assert.equal(err.metadata.index, "1");
  });

  test("streaming publisher: many messages, in-band refusals typed", async () => {
    const p = c.publisher("orders", { maxInFlight: 64 });
    const all: Promise<unknown>[] = [];
    let most = 0;
    for (let i = 0; i < 2000; i++) {
      // publish waits for room itself: no capacity() before it.
      all.push((await p.publish({ id: `s-${i}`, key: `k${i % 7}`, payload: `p${i}` })).result);
      most = Math.max(most, p.pending);
    }
    assert.equal(most, 64, "the window bounds what is pending, and fills");
    const rs = (await Promise.all(all)) as { id: string }[];
    assert.deepEqual(rs.map((r) => r.id), [...Array(2000).keys()].map((i) => `s-${i}`));
    const bad = await (await p.publish({ payload: Buffer.alloc(100_000) })).result.then(() => undefined, (e: unknown) => e);
    assert.ok(bad instanceof InvalidRequestError, `got ${String(bad)}`);
    assert.equal(bad.reason, Reason.MESSAGE_TOO_LARGE);
    // The stream stays open after an in-band refusal.
    assert.equal((await (await p.publish({ id: "after-bad", payload: "x" })).result).id, "after-bad");
    await p.close();
    const wrongTopic = c.publisher("nope");
    const e2 = await (await wrongTopic.publish({ payload: "x" })).result.then(() => undefined, (e: unknown) => e);
    assert.ok(e2 instanceof NotFoundError, `got ${String(e2)}`);
    assert.equal(e2.reason, Reason.UNKNOWN_TOPIC);
    await wrongTopic.close();
  });

  test("no sidecar: connect fails saying what to do", async () => {
    const port = await freePort();
    const err = await Client.connect(`127.0.0.1:${port}`, { connectTimeoutMs: 300 }).then(() => undefined, (e: unknown) => e);
    assert.ok(err instanceof SidecarUnreachableError, `got ${String(err)}`);
    assert.match(err.message, /is spoold running there\?/);
  });

  test("a scheduled message waits, and can be cancelled before its time", async () => {
    const gone = await c.publish("orders", { id: "ts-gone", key: "k", payload: "x", deliverAfterMs: 60_000 });
    await c.cancelScheduled("orders", "ts-gone", { at: gone });
    await c.cancelScheduled("orders", "ts-gone", { key: "k" }); // twice is fine
    const unknown = await c.cancelScheduled("orders", "never-published").then(() => undefined, (e: unknown) => e);
    assert.ok(unknown instanceof NotFoundError, `got ${String(unknown)}`);
    assert.equal(unknown.reason, Reason.UNKNOWN_SCHEDULED_MESSAGE);
    const far = await c.publish("orders", { payload: "x", deliverAt: new Date(Date.now() + 400 * 86_400_000) }).then(() => undefined, (e: unknown) => e);
    assert.ok(far instanceof SpoolError, `got ${String(far)}`);
    assert.equal(far.reason, Reason.INVALID_SCHEDULE);
  });
});
