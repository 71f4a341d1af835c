// Pure parts: outcomes, text limits, backoff, error details, the packaged protocol.
import { strict as assert } from "node:assert";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";

import { Metadata, status } from "@grpc/grpc-js";
import * as protobuf from "protobufjs";

import { DeadLetter, MAX_ERROR_TEXT_BYTES, PROTO_DIR, Release, Retry, RetryDownstream, errorInfo } from "@spoolmq/spool";
import { REPO_DIR } from "./harness";

// Internal modules, reached through the built package.
// eslint-disable-next-line @typescript-eslint/no-require-imports
const outcome = require(path.join(PROTO_DIR, "..", "dist", "outcome.js")) as typeof import("../dist/outcome");
// eslint-disable-next-line @typescript-eslint/no-require-imports
const backoff = require(path.join(PROTO_DIR, "..", "dist", "backoff.js")) as typeof import("../dist/backoff");
// eslint-disable-next-line @typescript-eslint/no-require-imports
const subscribe = require(path.join(PROTO_DIR, "..", "dist", "subscribe.js")) as typeof import("../dist/subscribe");

test("the packaged protocol equals the repository's", () => {
  const repo = path.join(REPO_DIR, "proto", "spool", "v1");
  const pkg = path.join(PROTO_DIR, "spool", "v1");
  const want = fs.readdirSync(repo).filter((f) => f.endsWith(".proto")).sort();
  assert.deepEqual(fs.readdirSync(pkg).sort(), want, "packaged .proto files differ from proto/spool/v1: run npm run build");
  for (const f of want) assert.equal(fs.readFileSync(path.join(pkg, f), "utf8"), fs.readFileSync(path.join(repo, f), "utf8"), `${f} is stale: run npm run build`);
});

test("handler results map to settlements", () => {
  const s = outcome.settlementFor;
  assert.equal(s(undefined, true).outcome, "OUTCOME_ACK");
  assert.deepEqual(s(new Error("boom"), false), { outcome: "OUTCOME_RETRY", retryAfterMs: 0, reason: "", error: "boom", downstream: "" });
  assert.equal(s("a string", false).error, "a string");
  const r = s(new Retry(1500, new Error("later")), false);
  assert.equal(r.outcome, "OUTCOME_RETRY");
  assert.equal(r.retryAfterMs, 1500);
  assert.match(r.error, /later/);
  assert.equal(s(new Retry(0.2), false).retryAfterMs, 1, "a positive delay below 1 ms still asks for a delay");
  const d = s(new RetryDownstream("email", 0, "down"), false);
  assert.equal(d.downstream, "email");
  assert.equal(d.retryAfterMs, 0);
  const dl = s(new DeadLetter("bad schema"), false);
  assert.equal(dl.outcome, "OUTCOME_DEAD_LETTER");
  assert.equal(dl.reason, "bad schema");
  assert.equal(s(new Release(), false).outcome, "OUTCOME_RELEASE");
  // Outcomes are found through the cause chain.
  assert.equal(s(new Error("charging", { cause: new DeadLetter("x") }), false).outcome, "OUTCOME_DEAD_LETTER");
});

test("error text is cut to 4 KiB on a character boundary", () => {
  const t = outcome.cleanText("é".repeat(5000));
  assert.ok(Buffer.byteLength(t) <= MAX_ERROR_TEXT_BYTES + 3);
  assert.ok(!t.includes("\uFFFD"));
  assert.equal(outcome.cleanText("a\uD800b"), "a\uFFFDb");
});

test("backoff: exponential with full jitter, capped", () => {
  const b = { baseMs: 100, maxMs: 5000 };
  assert.equal(backoff.backoffDelay(b, 0, 0.999), 99.9);
  assert.equal(backoff.backoffDelay(b, 3, 0.5), 400);
  assert.equal(backoff.backoffDelay(b, 30, 0.5), 2500);
  assert.equal(backoff.backoffDelay(b, 2, 0), 0);
});

test("ErrorInfo is read from grpc-status-details-bin", () => {
  const root = protobuf.Root.fromJSON({ nested: {
    Any: { fields: { type_url: { type: "string", id: 1 }, value: { type: "bytes", id: 2 } } },
    Status: { fields: { code: { type: "int32", id: 1 }, message: { type: "string", id: 2 }, details: { rule: "repeated", type: "Any", id: 3 } } },
    ErrorInfo: { fields: { reason: { type: "string", id: 1 }, domain: { type: "string", id: 2 }, metadata: { keyType: "string", type: "string", id: 3 } as protobuf.IField } },
  } });
  const ei = root.lookupType("ErrorInfo").encode({ reason: "UNKNOWN_TOPIC", domain: "spool.dev", metadata: { topic: "x" } }).finish();
  const st = root.lookupType("Status").encode({ code: status.NOT_FOUND, message: "m", details: [{ type_url: "type.googleapis.com/google.rpc.ErrorInfo", value: ei }] }).finish();
  const md = new Metadata();
  md.set("grpc-status-details-bin", Buffer.from(st));
  assert.deepEqual(errorInfo(md), { reason: "UNKNOWN_TOPIC", domain: "spool.dev", metadata: { topic: "x" } });
  assert.equal(errorInfo(new Metadata()), undefined);
});

// The sidecar applies a frame's settlements before its extends: a settled
// delivery's extension still queued must not go in the same frame (it
// would come back as a NOT_IN_FLIGHT settle error, docs/protocol.md).
test("a settlement drops the queued extensions of its delivery", () => {
  const a = { topic: "orders", partition: 0, offset: "1", fencingToken: "7" };
  const b = { topic: "orders", partition: 0, offset: "2", fencingToken: "8" };
  const queued = [{ ref: a, extendByMs: 0 }, { ref: b, extendByMs: 0 }];
  assert.deepEqual(subscribe.withoutExtensionsOf(queued, { ...a, offset: 1, fencingToken: 7 }), [{ ref: b, extendByMs: 0 }]);
  assert.equal(subscribe.withoutExtensionsOf(queued, { ...a, fencingToken: "9" }).length, 2, "another attempt of the message keeps its extension");
});

test("a scheduled message carries its time or delay to the sidecar", () => {
  const types = require(path.join(PROTO_DIR, "..", "dist", "types.js")) as typeof import("../dist/types"); // eslint-disable-line @typescript-eslint/no-require-imports
  const at = new Date(1_900_000_000_123);
  assert.equal(types.toPublishMessage({ payload: "x", deliverAt: at }).deliverAtMs, "1900000000123");
  assert.equal(types.toPublishMessage({ payload: "x", deliverAfterMs: 1500.2 }).deliverAfterMs, "1501");
  const plain = types.toPublishMessage({ payload: "x" });
  assert.equal(plain.deliverAtMs, "0");
  assert.equal(plain.deliverAfterMs, "0");
  assert.equal(plain.deliverInKeyOrder, false);
  assert.equal(types.toPublishMessage({ payload: "x", deliverAfterMs: 1000, deliverInKeyOrder: true }).deliverInKeyOrder, true);
  assert.throws(() => types.toPublishMessage({ payload: "x", deliverAt: new Date("not a date") }), /deliverAt is not a valid time/);
});
