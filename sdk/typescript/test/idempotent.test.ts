// idempotent() against a real PostgreSQL (Debian's postgresql package;
// skipped with a message when it is not installed, unless
// SPOOL_TEST_REQUIRE_PG=1) and, end to end, a real spoold.
import { strict as assert } from "node:assert";
import { after, before, describe, test } from "node:test";

import { Pool, type PoolClient } from "pg";

import { Client, DeadLetter, IdempotentStats, Stats, idempotent, type Message } from "@spoolmq/spool";
import { Node, eventually } from "./harness";
import { Postgres, findPgBin } from "./postgres";

const bin = findPgBin();
const skip = bin ? false : "PostgreSQL not installed (apt-get install postgresql): idempotent() not tested against a database";
if (!bin && process.env.SPOOL_TEST_REQUIRE_PG === "1") throw new Error("SPOOL_TEST_REQUIRE_PG=1 and no PostgreSQL under /usr/lib/postgresql");

function msg(id: string, token = 1n, group = "billing"): Message {
  return {
    id, topic: "orders", partition: 0, offset: 0n, key: Buffer.from("alice"), payload: Buffer.from("100"), headers: {},
    publishTime: new Date(), firstDeliveryTime: new Date(), leaseDeadline: new Date(), attempt: 1, lastError: "", fencingToken: token, group,
  };
}

describe("idempotent with PostgreSQL", { skip }, () => {
  let pg: Postgres;
  let pool: Pool;
  before(async () => {
    pg = await Postgres.start(bin!);
    pool = new Pool({ connectionString: pg.url, max: 10 });
    // An idle client whose server goes away (the server stopped after the
    // tests) is reported on the pool: without a listener that is an
    // uncaught exception that fails the file after its tests passed.
    pool.on("error", () => {});
    await pool.query("CREATE TABLE wallets (customer TEXT PRIMARY KEY, balance BIGINT NOT NULL)");
  });
  after(async () => {
    await pool?.end();
    await pg?.stop();
  });

  const credit = (tx: PoolClient, m: Message) =>
    tx.query("INSERT INTO wallets VALUES ($1, $2) ON CONFLICT (customer) DO UPDATE SET balance = wallets.balance + $2", [m.key.toString(), Number(m.payload.toString())]);
  const balance = async (who: string) => Number((await pool.query("SELECT balance FROM wallets WHERE customer = $1", [who])).rows[0]?.balance ?? 0);
  const signal = new AbortController().signal;

  test("work commits once; a redelivery is skipped and acked", async () => {
    const stats = new IdempotentStats();
    const h = idempotent(pool, async (tx, m) => { await credit(tx, m); }, { stats });
    await h(msg("refund-1"), signal);
    await h(msg("refund-1", 2n), signal); // the ack was lost: delivered again with a new token
    assert.equal(await balance("alice"), 100);
    assert.equal(stats.processed, 1);
    assert.equal(stats.duplicates, 1);
    const row = (await pool.query("SELECT consumer_group, fencing_token FROM spool_processed WHERE message_id = 'refund-1'")).rows[0];
    assert.deepEqual(row, { consumer_group: "billing", fencing_token: "1" });
    // Another group processes the same message on its own.
    await h(msg("refund-1", 1n, "audit"), signal);
    assert.equal(await balance("alice"), 200);
  });

  test("a failed attempt leaves nothing; the outcome is rethrown unchanged", async () => {
    const stats = new IdempotentStats();
    let fail: unknown = new Error("downstream timeout");
    const h = idempotent(pool, async (tx, m) => {
      await credit(tx, m);
      if (fail) throw fail;
    }, { stats });
    const before = await balance("alice");
    await assert.rejects(h(msg("refund-2"), signal), /downstream timeout/);
    fail = new DeadLetter("bad customer");
    await assert.rejects(h(msg("refund-2"), signal), (e: unknown) => e instanceof DeadLetter);
    assert.equal(await balance("alice"), before, "a rolled-back attempt changed the wallet");
    fail = undefined;
    await h(msg("refund-2"), signal);
    assert.equal(await balance("alice"), before + 100);
    assert.deepEqual({ ...stats }, { processed: 1, duplicates: 0, failed: 2 });
  });

  test("two attempts at once: the database serialises them, the work happens once", async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let calls = 0;
    const h = idempotent(pool, async (tx, m) => {
      calls++;
      await credit(tx, m);
      await gate; // the first attempt holds the id's row lock
    });
    const before = await balance("alice");
    const first = h(msg("refund-3", 1n), signal);
    await eventually("first attempt inside its transaction", () => calls === 1);
    const second = h(msg("refund-3", 2n), signal); // a lease expired: a newer attempt
    release();
    await Promise.all([first, second]);
    assert.equal(calls, 1);
    assert.equal(await balance("alice"), before + 100);
  });

  test("end to end: an ack lost after the commit does not redo the work", async () => {
    const n = await Node.start(`
topics:
  - name: orders
    partitions: 2
subscriptions:
  - topic: orders
    group: billing
    max_attempts: 5
    backoff: {base: 20ms, max: 100ms, multiplier: 2}
`);
    const c = await Client.connect(n.app);
    try {
      const stats = new IdempotentStats();
      const inner = idempotent(pool, async (tx, m) => { await credit(tx, m); }, { stats });
      let first = true;
      const handler = async (m: Message, s: AbortSignal) => {
        await inner(m, s);
        if (first) {
          first = false;
          throw new Error("crashed after the commit, before the ack"); // the sidecar delivers it again
        }
      };
      const before = await balance("bob");
      await c.publish("orders", { id: "refund-e2e", key: "bob", payload: "100" });
      const ac = new AbortController();
      const subStats = new Stats();
      const done = c.subscribe({ group: "billing", topics: ["orders"], handler, signal: ac.signal, shutdownSignals: [], stats: subStats });
      await eventually("acked on the second delivery", () => subStats.acked === 1);
      ac.abort();
      await done;
      assert.equal(await balance("bob"), before + 100);
      assert.equal(stats.processed, 1);
      assert.equal(stats.duplicates, 1);
    } finally {
      c.close();
      await n.kill();
    }
  });
  // docs/semantics.md, "Testing a handler": two groups under every fault an
  // unreliable network makes (spoold --dev allows them); a handler without
  // idempotency runs some messages twice, idempotent() applies each once.
  test("under fault injection: the work commits once per message", async () => {
    const sub = (group: string, seed: number) => `  - topic: orders
    group: ${group}
    max_attempts: 50
    visibility_timeout: 1s
    backoff: {base: 10ms, max: 50ms, multiplier: 2}
    faults: {duplicate: 0.2, lose_ack: 0.2, delay: 0.2, delay_max: 30ms, early_lease_expiry: 0.05, seed: ${seed}}
`;
    const n = await Node.start("topics:\n  - name: orders\n    partitions: 4\nsubscriptions:\n" + sub("naive", 1) + sub("billing", 2), ["--dev"]);
    const c = await Client.connect(n.app);
    try {
      const count = 40;
      for (let i = 0; i < count; i++) await c.publish("orders", { id: `credit-${i}`, key: "carol", payload: "1" });
      const seen = new Map<string, number>();
      const stats = new IdempotentStats();
      const ac = new AbortController();
      const done = [
        c.subscribe({ group: "naive", topics: ["orders"], handler: async (m: Message) => { seen.set(m.id, (seen.get(m.id) ?? 0) + 1); }, signal: ac.signal, shutdownSignals: [] }),
        c.subscribe({ group: "billing", topics: ["orders"], handler: idempotent(pool, async (tx, m) => { await credit(tx, m); }, { stats }), signal: ac.signal, shutdownSignals: [] }),
      ];
      await eventually("every message handled by both groups", () => stats.processed === count && seen.size === count, 60_000);
      ac.abort();
      await Promise.all(done);
      let runs = 0;
      for (const k of seen.values()) runs += k;
      assert.ok(runs > count, "the faults reached no handler: every message came once");
      assert.ok(stats.duplicates > 0);
      assert.equal(await balance("carol"), count);
    } finally {
      c.close();
      await n.kill();
    }
  });
});
