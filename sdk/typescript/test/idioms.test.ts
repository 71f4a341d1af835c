// The forms a Node user expects: await close() and `await using`, deliveries
// with `for await`, signals left to the application.
import { strict as assert } from "node:assert";
import { after, afterEach, before, beforeEach, describe, test } from "node:test";

import { connectivityState } from "@grpc/grpc-js";
import { Client, DeadLetter, Stats, type Message } from "@spoolmq/spool";
import { Node, Redis, call } from "./harness";

const CONFIG = (redis: string) => `redis:
  addrs: [${JSON.stringify(redis)}]
topics:
  - name: orders
    partitions: 4
subscriptions:
  - topic: orders
    group: workers
    max_attempts: 3
    visibility_timeout: 10s
    backoff: {base: 20ms, max: 100ms, multiplier: 2}
`;

describe("idioms", () => {
  let redis: Redis;
  let n: Node; // a fresh spoold for each test: nothing left over from the one before
  before(async () => {
    redis = await Redis.start();
  });
  after(() => redis.stop());
  beforeEach(async () => {
    n = await Node.start(CONFIG(redis.addr));
  });
  afterEach(() => n.kill());

  test("await using closes the client; close() is awaitable", async () => {
    let seen: Client;
    {
      await using c = await Client.connect(n.app);
      seen = c;
      await c.publish("orders", { key: "k", payload: "x" });
    }
    assert.equal(seen.channel.getConnectivityState(false), connectivityState.SHUTDOWN, "the client was not closed at the end of the block");
    const c2 = await Client.connect(n.app);
    const closing = c2.close();
    assert.ok(closing instanceof Promise);
    await closing;
    {
      await using c3 = await Client.connect(n.app);
      await using p = c3.publisher("orders");
      await (await p.publish({ key: "k", payload: "piped" })).result;
    } // the publisher closes first (its unconfirmed messages are waited for), then the client
  });

  test("for await: ack, nack, dead letter; break releases what is not settled", async () => {
    await using c = await Client.connect(n.app);
    await c.publish("orders", { id: "ok", key: "a", payload: "ok" });
    await c.publish("orders", { id: "retry", key: "b", payload: "retry-once" });
    await c.publish("orders", { id: "dead", key: "c", payload: "poison" });
    const seen: string[] = [];
    const stats = new Stats();
    // One at a time (credit 1): nothing else is in flight when the loop breaks on "left".
    for await (const m of c.messages({ group: "workers", topics: ["orders"], concurrency: 1, prefetch: 0, stats })) {
      seen.push(`${m.id}@${m.attempt}`);
      if (m.id === "ok") m.ack();
      else if (m.id === "retry" && m.attempt === 1) m.nack();
      else if (m.id === "retry") {
        m.ack();
        await c.publish("orders", { id: "left", key: "d", payload: "left" });
      } else if (m.id === "dead") m.nack(new DeadLetter("bad schema"));
      else break; // "left", not settled
    }
    assert.deepEqual(seen.sort(), ["dead@1", "left@1", "ok@1", "retry@1", "retry@2"]);
    assert.equal(stats.acked, 2);
    assert.equal(stats.deadLettered, 1);
    assert.equal(stats.released, 1);

    // The released message comes back at attempt 1: no attempt counted.
    for await (const m of c.messages({ group: "workers", topics: ["orders"] })) {
      assert.equal(`${m.id}@${m.attempt}`, "left@1");
      m.ack();
      break;
    }
    const admin = n.adminClient();
    const resp = await call(admin.peekDeadLetters.bind(admin), { group: "workers", topic: "orders" });
    assert.deepEqual(resp.entries.map((e) => e.reason), ["bad schema"]);
    admin.close();
  });

  test("for await ends when its signal aborts, and throws a refusal", async () => {
    await using c = await Client.connect(n.app);
    await c.publish("orders", { key: "k", payload: "x" });
    const ac = new AbortController();
    let got = 0;
    for await (const m of c.messages({ group: "workers", topics: ["orders"], signal: ac.signal })) {
      got++;
      m.ack();
      ac.abort();
    }
    assert.equal(got, 1);
    const err = await (async () => {
      for await (const m of c.messages({ group: "nobody", topics: ["orders"] })) m.ack();
    })().then(() => undefined, (e: unknown) => e);
    assert.ok(err instanceof Error && /nobody|UNKNOWN_GROUP|subscription/i.test(err.message), `got ${String(err)}`);
  });

  test("subscribe leaves process signals to the application by default", async () => {
    await using c = await Client.connect(n.app);
    const before = process.listenerCount("SIGTERM") + process.listenerCount("SIGINT");
    const ac = new AbortController();
    const done = c.subscribe({ group: "workers", topics: ["orders"], signal: ac.signal, handler: async (_m: Message) => {} });
    // Listeners would be added when subscribe is called, before its first await.
    assert.equal(process.listenerCount("SIGTERM") + process.listenerCount("SIGINT"), before, "subscribe added process signal listeners");
    ac.abort();
    await done;
    const ac2 = new AbortController();
    const opted = c.subscribe({ group: "workers", topics: ["orders"], signal: ac2.signal, shutdownSignals: ["SIGTERM"], handler: async () => {} });
    assert.equal(process.listenerCount("SIGTERM"), before + 1, "shutdownSignals adds its listener");
    ac2.abort();
    await opted;
    assert.equal(process.listenerCount("SIGTERM") + process.listenerCount("SIGINT"), before);
  });
});
