// @ts-check
// The TypeScript SDK's conformance app (plain JavaScript on the SDK's build,
// sdk/typescript/dist, so it needs no compile step of its own): the harness
// in sdk/conformance starts it with a JSON spec as its only argument and
// reads one JSON event per line from its stdout. Every SDK has the same app
// (sdk/conformance/apps/<lang>); sdk/conformance/README.md is the contract.
"use strict";

const { Client, Retry, DeadLetter, Release, Stats, SpoolError } = require("../../../typescript/dist/index.js");

/** @param {Record<string, unknown>} ev */
function emit(ev) {
  process.stdout.write(JSON.stringify(ev, (_k, v) => (typeof v === "bigint" ? Number(v) : v)) + "\n");
}

/** @param {string} payload */
function directives(payload) {
  /** @type {Record<string, string>} */
  const d = {};
  for (const w of payload.split(/\s+/).filter(Boolean)) {
    const i = w.indexOf("=");
    d[i < 0 ? w : w.slice(0, i)] = i < 0 ? "" : w.slice(i + 1);
  }
  return d;
}

/** @param {string} kind @param {unknown} e */
function errorEvent(kind, e) {
  if (e instanceof SpoolError) {
    return { ev: kind, type: e.name, code: String(e.code), reason: e.reason, message: e.message };
  }
  return { ev: kind, type: e instanceof Error ? e.name : typeof e, message: String(e) };
}

/** @param {AbortSignal} signal @param {number} ms */
function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => { clearTimeout(t); reject(new Error("aborted")); }, { once: true });
  });
}

/** @param {any} client @param {any} s */
async function consume(client, s) {
  /** @type {Map<string, number>} */
  const seen = new Map();
  const stats = new Stats();
  /** @param {any} m @param {AbortSignal} signal */
  const handler = async (m, signal) => {
    const n = (seen.get(m.id) ?? 0) + 1;
    seen.set(m.id, n);
    const key = m.key.toString();
    const payload = m.payload.toString();
    emit({ ev: "start", id: m.id, key, payload, attempt: m.attempt, partition: m.partition, offset: m.offset, token: m.fencingToken, last_error: m.lastError, time_ms: Date.now() });
    /** @param {string} outcome */
    const finish = (outcome) => emit({ ev: "finish", id: m.id, key, attempt: m.attempt, outcome, time_ms: Date.now() });
    if (s.delay_ms > 0) {
      try {
        await sleep(s.delay_ms, signal);
      } catch (e) {
        finish("cancelled");
        throw e;
      }
    }
    const d = directives(payload);
    if ("release" in d && n <= Number(d.release)) {
      finish("release");
      throw new Release();
    }
    if ("fail" in d && m.attempt <= Number(d.fail)) {
      finish("retry");
      const err = new Error(`fail attempt ${m.attempt}`);
      if ("retry_after" in d) throw new Retry(Number(d.retry_after), err);
      throw err;
    }
    if ("dead" in d) {
      finish("dead");
      throw new DeadLetter(d.dead);
    }
    finish("ack");
  };
  try {
    await client.subscribe({
      group: s.group, topics: s.topics, handler, concurrency: s.concurrency, prefetch: s.prefetch, stats,
      drainTimeoutMs: s.drain_timeout_ms || 30000, appVersion: "conformance-typescript",
      shutdownSignals: ["SIGTERM", "SIGINT"],
    });
  } catch (e) {
    emit(errorEvent("subscribe_error", e));
    return 1;
  }
  emit({ ev: "exit", released: stats.released, settle_errors: stats.settleErrors });
  return 0;
}

/** @param {any} client @param {any} s */
async function publish(client, s) {
  const msgs = s.messages.map((/** @type {any} */ m) => ({
    id: m.id, key: m.key, payload: m.payload_bytes ? "x".repeat(m.payload_bytes) : m.payload,
  }));
  try {
    const rs = await client.publishBatch(s.topic, msgs);
    emit({ ev: "published", results: rs.map((/** @type {any} */ r) => ({ id: r.id, partition: r.partition, offset: r.offset })) });
  } catch (e) {
    emit(errorEvent("publish_error", e));
  }
}

async function main() {
  const s = JSON.parse(process.argv[2]);
  const client = await Client.connect(s.addr);
  try {
    return s.mode === "consume" ? await consume(client, s) : (await publish(client, s), 0);
  } finally {
    client.close();
  }
}

main().then((code) => { process.exitCode = code; }, (e) => { console.error("app:", e); process.exitCode = 2; });
