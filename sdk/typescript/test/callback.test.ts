// Callback mode against a real spoold: the sidecar calls the app's Handle.
import { strict as assert } from "node:assert";
import { test } from "node:test";

import { Client, DeadLetter, Retry, serveHandler } from "@spoolmq/spool";
import { Node, call, eventually, freePort } from "./harness";

test("callback mode: ack, retry, dead letter, release", async () => {
  const port = await freePort();
  const attempts = new Map<string, number[]>();
  const acked = new Set<string>();
  let released = 0;
  const ac = new AbortController();
  const srv = await serveHandler({
    address: `127.0.0.1:${port}`,
    signal: ac.signal,
    shutdownSignals: [],
    handler: async (m) => {
      (attempts.get(m.id) ?? attempts.set(m.id, []).get(m.id)!).push(m.attempt);
      const k = m.key.toString();
      if (k === "flaky" && m.attempt === 1) throw new Retry(10, new Error("timeout talking to the provider"));
      if (k === "thrown" && m.attempt === 1) throw new Error("boom");
      if (k === "bad") throw new DeadLetter("malformed order");
      if (k === "release" && released < 2) {
        released++;
        const { Release } = await import("@spoolmq/spool");
        throw new Release();
      }
      acked.add(m.id);
    },
  });
  assert.equal(srv.port, port);
  const n = await Node.start(`
topics:
  - name: orders
    partitions: 2
subscriptions:
  - topic: orders
    group: mailer
    delivery: callback
    app_address: "127.0.0.1:${port}"
    max_attempts: 3
    backoff: {base: 20ms, max: 100ms, multiplier: 2}
`);
  const c = await Client.connect(n.app);
  try {
    const keys = ["a", "flaky", "thrown", "bad", "release"];
    await c.publishBatch("orders", keys.map((k) => ({ id: `cb-${k}`, key: k, payload: k })));
    await eventually("all but the bad message acked", () => acked.size === 4);
    assert.deepEqual(attempts.get("cb-a"), [1]);
    assert.deepEqual(attempts.get("cb-flaky"), [1, 2]);
    assert.deepEqual(attempts.get("cb-thrown"), [1, 2]);
    assert.deepEqual(attempts.get("cb-release"), [1, 1, 1], "a release counted an attempt");
    const admin = n.adminClient();
    let entries: Awaited<ReturnType<typeof peek>> = [];
    const peek = async () => (await call(admin.peekDeadLetters.bind(admin), { group: "mailer", topic: "orders" })).entries;
    await eventually("the bad message dead-lettered", async () => (entries = await peek()).length === 1);
    admin.close();
    assert.equal(entries[0]!.reason, "malformed order");
    assert.equal(entries[0]!.message?.messageId, "cb-bad");
  } finally {
    c.close();
    await n.kill();
    ac.abort();
    await srv.closed;
  }
});
