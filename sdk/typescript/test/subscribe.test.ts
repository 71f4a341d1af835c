// Subscribe against a real spoold: outcomes, attempts, dead letters,
// release, lease extension, per-key order, reconnect.
import { strict as assert } from "node:assert";
import { after, before, describe, test } from "node:test";

import { Client, DeadLetter, Release, Retry, RetryDownstream, Stats, type Message } from "@spoolmq/spool";
import { Node, Redis, call, eventually } from "./harness";

function config(opts: { visibility?: string; redis?: string; maxAttempts?: number } = {}): string {
  return `${opts.redis ? `redis:\n  addrs: [${JSON.stringify(opts.redis)}]\n` : ""}
topics:
  - name: orders
    partitions: 4
subscriptions:
  - topic: orders
    group: workers
    max_attempts: ${opts.maxAttempts ?? 4}
    visibility_timeout: ${opts.visibility ?? "10s"}
    ordering: key
    backoff: {base: 20ms, max: 100ms, multiplier: 2}
`;
}

/** Runs a subscription until stop() and returns its promise. */
function run(c: Client, handler: (m: Message, signal: AbortSignal) => Promise<void>, extra: Partial<Parameters<Client["subscribe"]>[0]> = {}) {
  const ac = new AbortController();
  const stats = new Stats();
  const done = c.subscribe({ group: "workers", topics: ["orders"], handler, signal: ac.signal, shutdownSignals: [], stats, reconnectBackoff: { baseMs: 20, maxMs: 200 }, ...extra });
  return { stats, done, stop: async () => { ac.abort(); await done; } };
}

async function deadLetters(n: Node) {
  const admin = n.adminClient();
  try {
    const resp = await call(admin.peekDeadLetters.bind(admin), { group: "workers", topic: "orders" });
    return resp.entries ?? [];
  } finally {
    admin.close();
  }
}

describe("subscribe", () => {
  let n: Node;
  let c: Client;
  before(async () => {
    n = await Node.start(config());
  });
  after(async () => {
    c?.close();
    await n.kill();
  });

  test("ack, retry with growing attempts, dead letter with reason", async () => {
    c = await Client.connect(n.app);
    const seen = new Map<string, { attempts: number[]; lastErrors: string[] }>();
    const fields: Message[] = [];
    const sub = run(c, async (m) => {
      const s = seen.get(m.id) ?? { attempts: [], lastErrors: [] };
      s.attempts.push(m.attempt);
      s.lastErrors.push(m.lastError);
      seen.set(m.id, s);
      fields.push(m);
      const kind = m.headers.kind;
      if (kind === "flaky" && m.attempt < 3) throw new Error(`flaky failure ${m.attempt}`);
      if (kind === "later" && m.attempt < 2) throw new Retry(30, new Error("not yet"));
      if (kind === "down" && m.attempt < 2) throw new RetryDownstream("provider", 0, "provider down");
      if (kind === "poison") throw new DeadLetter("malformed order");
    });
    const kinds = ["ok", "flaky", "later", "down", "poison"];
    const results = await c.publishBatch("orders", kinds.map((k) => ({ id: `m-${k}`, key: `key-${k}`, payload: `payload-${k}`, headers: { kind: k } })));
    assert.deepEqual(results.map((r) => r.id), kinds.map((k) => `m-${k}`));
    await eventually("every message settled", () => sub.stats.acked === 4 && sub.stats.deadLettered === 1);
    await sub.stop();

    assert.deepEqual(seen.get("m-ok")!.attempts, [1]);
    assert.deepEqual(seen.get("m-flaky")!.attempts, [1, 2, 3]);
    assert.deepEqual(seen.get("m-flaky")!.lastErrors, ["", "flaky failure 1", "flaky failure 2"]);
    assert.deepEqual(seen.get("m-later")!.attempts, [1, 2]);
    assert.match(seen.get("m-later")!.lastErrors[1]!, /not yet/);
    assert.deepEqual(seen.get("m-down")!.attempts, [1, 2]);
    assert.deepEqual(seen.get("m-poison")!.attempts, [1]);

    const m = fields.find((f) => f.id === "m-ok")!;
    assert.equal(m.topic, "orders");
    assert.equal(m.group, "workers");
    assert.equal(m.key.toString(), "key-ok");
    assert.equal(m.payload.toString(), "payload-ok");
    assert.equal(typeof m.offset, "bigint");
    assert.ok(m.fencingToken > 0n);
    assert.ok(m.publishTime.getTime() > Date.now() - 60_000);
    assert.ok(m.leaseDeadline.getTime() > m.publishTime.getTime());
    const r = results.find((x) => x.id === "m-ok")!;
    assert.equal(m.partition, r.partition);
    assert.equal(m.offset, r.offset);

    // The app's DEAD_LETTER is settled before the sidecar has written the
    // entry to the dead-letter topic: wait for it there.
    let dl = await deadLetters(n);
    await eventually("the dead letter stored", async () => (dl = await deadLetters(n)).length > 0);
    assert.equal(dl.length, 1);
    assert.equal(dl[0]!.reason, "malformed order");
    assert.equal(dl[0]!.message?.messageId, "m-poison");
    assert.equal(dl[0]!.message?.payload.toString(), "payload-poison");
  });

  test("per-key order with concurrency > 1", async () => {
    const keys = 20;
    const perKey = 15;
    const msgs = [];
    for (let i = 0; i < keys * perKey; i++) msgs.push({ id: `order-${i}`, key: `k${i % keys}`, payload: String(Math.floor(i / keys)) });
    await c.publishBatch("orders", msgs);
    const atApp = new Set<string>();
    const order = new Map<string, number[]>();
    let overlap = "";
    let maxRunning = 0;
    let running = 0;
    const sub = run(c, async (m) => {
      if (!m.id.startsWith("order-")) return;
      const k = m.key.toString();
      if (atApp.has(k)) overlap = k;
      atApp.add(k);
      running++;
      maxRunning = Math.max(maxRunning, running);
      await new Promise((r) => setTimeout(r, 2 + Math.random() * 3));
      (order.get(k) ?? order.set(k, []).get(k)!).push(Number(m.payload.toString()));
      atApp.delete(k);
      running--;
    }, { concurrency: 16 });
    await eventually("all ordered messages handled", () => [...order.values()].reduce((a, v) => a + v.length, 0) >= keys * perKey);
    await sub.stop();
    assert.equal(overlap, "", `key ${overlap} had two messages at the app at once`);
    assert.ok(maxRunning > 1, `handlers ran one at a time (max ${maxRunning}): concurrency not used`);
    for (const [k, seq] of order) assert.deepEqual(seq, [...Array(perKey).keys()], `key ${k} out of order`);
  });
});

describe("leases and reconnect", () => {
  test("lease extension keeps a handler slower than the visibility timeout", async () => {
    const n = await Node.start(config({ visibility: "1s" }));
    const c = await Client.connect(n.app);
    try {
      const attempts: number[] = [];
      const sub = run(c, async (m) => {
        attempts.push(m.attempt);
        await new Promise((r) => setTimeout(r, 2600)); // 2.6 visibility timeouts
      });
      await c.publish("orders", { id: "slow", key: "slow", payload: "x" });
      await eventually("slow message acked", () => sub.stats.acked === 1);
      await sub.stop();
      assert.deepEqual(attempts, [1], "the lease expired and the message came again");
      assert.ok(sub.stats.extended >= 3, `extended ${sub.stats.extended} times, want at least 3`);
      assert.equal(sub.stats.settleErrors, 0);
    } finally {
      c.close();
      await n.kill();
    }
  });

  test("prefetched deliveries keep their lease while they wait for a worker", async () => {
    const n = await Node.start(config({ visibility: "1s" }));
    const c = await Client.connect(n.app);
    try {
      const attempts = new Map<string, number[]>();
      // One worker, two prefetched, 1.2 s handlers: the third waits 2.4 s.
      const sub = run(c, async (m) => {
        attempts.set(m.id, [...(attempts.get(m.id) ?? []), m.attempt]);
        await new Promise((r) => setTimeout(r, 1200));
      }, { concurrency: 1, prefetch: 2 });
      await c.publishBatch("orders", ["a", "b", "c"].map((k) => ({ id: `wait-${k}`, key: k, payload: "x" })));
      await eventually("three messages acked", () => sub.stats.acked === 3, 20_000);
      await sub.stop();
      for (const k of ["a", "b", "c"]) assert.deepEqual(attempts.get(`wait-${k}`), [1], `wait-${k}: its lease expired while it waited`);
      assert.equal(sub.stats.settleErrors, 0);
    } finally {
      c.close();
      await n.kill();
    }
  });

  test("release does not count an attempt (Redis ledger)", async () => {
    const redis = await Redis.start();
    const n = await Node.start(config({ redis: redis.addr }));
    const c = await Client.connect(n.app);
    try {
      const attempts: number[] = [];
      let releases = 0;
      const sub = run(c, async (m) => {
        attempts.push(m.attempt);
        if (releases < 3) {
          releases++;
          throw new Release("not now");
        }
        if (m.attempt === 1) throw new Error("one real failure");
      });
      await c.publish("orders", { id: "rel", key: "rel", payload: "x" });
      await eventually("released three times, failed once, then acked", () => sub.stats.acked === 1);
      await sub.stop();
      assert.equal(sub.stats.released, 3);
      assert.deepEqual(attempts, [1, 1, 1, 1, 2], "a release counted an attempt");
    } finally {
      c.close();
      await n.kill();
      redis.stop();
    }
  });

  test("reconnects after spoold restarts; nothing lost", async () => {
    const n = await Node.start(config());
    const c = await Client.connect(n.app);
    const warnings: string[] = [];
    try {
      const handled = new Set<string>();
      const sub = run(c, async (m) => {
        handled.add(m.id);
      }, { logger: { warn: (msg) => warnings.push(msg), error: (msg) => warnings.push(msg) } });
      await c.publishBatch("orders", [1, 2, 3].map((i) => ({ id: `before-${i}`, payload: "x" })));
      await eventually("messages before the restart handled", () => handled.size === 3);
      await n.restart();
      // The channel may still be waiting to reconnect: retry with the same ids, as a producer should.
      await eventually("publish after the restart", () => c.publishBatch("orders", [1, 2, 3].map((i) => ({ id: `after-${i}`, payload: "x" }))).then(() => true, () => false));
      await eventually("messages after the restart handled", () => ["after-1", "after-2", "after-3"].every((id) => handled.has(id)));
      await sub.stop();
      assert.ok(sub.stats.reconnects >= 1, "no reconnect counted");
      assert.ok(warnings.some((w) => /reconnecting/.test(w)), `no reconnect logged: ${warnings.join("; ")}`);
    } finally {
      c.close();
      await n.kill();
    }
  });
});
