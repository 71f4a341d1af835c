// Callback mode against a real spoold: the sidecar calls the app's Handle.
import { strict as assert } from "node:assert";
import * as path from "node:path";
import { test } from "node:test";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

import { Client, DEFAULT_HANDLER_ADDRESS, DeadLetter, Retry, serveHandler } from "@spoolmq/spool";
import { Node, PKG_DIR, call, eventually, freePort } from "./harness";

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

const TOKEN = "0123456789abcdef0123456789abcdef-typescript";

// A raw HandlerService client, as any caller on the network could make.
function handleCall(port: number, authorization?: string): Promise<{ outcome: string }> {
  const def = protoLoader.loadSync("spool/v1/handler.proto", { keepCase: false, longs: String, enums: String, defaults: true, oneofs: true, includeDirs: [path.join(PKG_DIR, "proto")] });
  const pkg = grpc.loadPackageDefinition(def) as unknown as { spool: { v1: { HandlerService: grpc.ServiceClientConstructor } } };
  const client = new pkg.spool.v1.HandlerService(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const md = new grpc.Metadata();
  if (authorization !== undefined) md.set("authorization", authorization);
  const req = { delivery: { topic: "orders", messageId: "m1", payload: Buffer.from("x"), attempt: 1 } };
  return new Promise((resolve, reject) => {
    (client as unknown as { handle: (r: unknown, m: grpc.Metadata, cb: (e: grpc.ServiceError | null, res: { outcome: string }) => void) => void }).handle(req, md, (e, res) => {
      client.close();
      if (e) reject(e);
      else resolve(res);
    });
  });
}

test("callback token: a call without it or with another is refused before the handler runs", async () => {
  const ran: string[] = [];
  const ac = new AbortController();
  const srv = await serveHandler({ address: "127.0.0.1:0", token: TOKEN, signal: ac.signal, shutdownSignals: [], handler: async (m) => void ran.push(m.id) });
  try {
    for (const auth of [undefined, "Bearer wrong-token-0123456789abcdef0123456789", TOKEN]) {
      await assert.rejects(handleCall(srv.port, auth), (e: grpc.ServiceError) => {
        assert.equal(e.code, grpc.status.UNAUTHENTICATED, `authorization ${auth}`);
        assert.ok(!e.details.includes(TOKEN));
        return true;
      });
    }
    assert.deepEqual(ran, [], "the handler ran for a refused call");
    const res = await handleCall(srv.port, `Bearer ${TOKEN}`);
    assert.equal(res.outcome, "OUTCOME_ACK");
    assert.deepEqual(ran, ["m1"]);
  } finally {
    ac.abort();
    await srv.closed;
  }
});

test("callback default address: loopback, on a port none of spoold's", async () => {
  assert.equal(DEFAULT_HANDLER_ADDRESS, "127.0.0.1:7080"); // spoold: app 7070, admin 7071, cluster 7072, probe 7073
  const ac = new AbortController();
  const srv = await serveHandler({ address: ":0", signal: ac.signal, shutdownSignals: [], handler: async () => {} });
  try {
    assert.equal(srv.address, `127.0.0.1:${srv.port}`, "an address without a host listens on loopback");
    assert.equal((await handleCall(srv.port)).outcome, "OUTCOME_ACK");
  } finally {
    ac.abort();
    await srv.closed;
  }
});
