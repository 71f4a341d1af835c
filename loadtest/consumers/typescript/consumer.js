// @ts-check
// The TypeScript SDK's consumer program for the loadtest (consumer_sdk:
// typescript), plain JavaScript on the SDK's build (sdk/typescript/dist):
// loadtest/consumers/README.md is the contract. A JSON spec as the only
// argument; "ready" once connected; subscribe at the first line on stdin;
// the handled ids in batches on stdout ("i ID ID ..."); when stdin ends,
// drain, write the ids left and an exit line, exit 0. The handler acks
// (resolves) after pushing the id onto an array.
"use strict";

const { Client, Stats } = require("../../../sdk/typescript/dist/index.js");

/** A batch this large is written at once, without waiting for the timer. */
const FLUSH_IDS = 8192;

async function main() {
  const s = JSON.parse(process.argv[2]);
  const client = await Client.connect(s.addr);
  /** @type {string[]} */
  let ids = [];
  let handled = 0;
  const flush = () => {
    if (ids.length === 0) return;
    process.stdout.write("i " + ids.join(" ") + "\n");
    ids = [];
  };
  process.stdout.write("ready\n");

  const stop = new AbortController();
  let started = false;
  /** @type {() => void} */
  let start = () => {};
  const go = new Promise((resolve) => { start = () => resolve(undefined); });
  let pending = "";
  process.stdin.setEncoding("utf8");
  process.stdin.on("data", (chunk) => {
    pending += chunk;
    if (!started && pending.includes("\n")) {
      started = true;
      start();
    }
  });
  process.stdin.on("end", () => {
    if (!started) {
      console.error("consumer: stdin ended before the start line");
      process.exit(1);
    }
    stop.abort(); // stdin ending is the stop
  });
  await go;

  const profile = await startProfile(process.env.SPOOL_CONSUMER_CPU_PROF);
  const timer = setInterval(flush, Math.max(1, s.report_ms));
  const stats = new Stats();
  /** @type {import("../../../sdk/typescript/dist/index.js").SubscribeOptions} */
  const sub = {
    group: s.group, topics: [s.topic], concurrency: s.concurrency, consumerName: s.name,
    drainTimeoutMs: 5000, signal: stop.signal, shutdownSignals: [], stats,
    handler: async (m) => {
      ids.push(m.id);
      handled++;
      if (ids.length >= FLUSH_IDS) flush();
    },
  };
  if (s.prefetch >= 0) sub.prefetch = s.prefetch;
  let code = 0;
  try {
    await client.subscribe(sub);
  } catch (e) {
    console.error("consumer:", e);
    code = 1;
  }
  clearInterval(timer);
  flush();
  await profile();
  process.stdout.write(JSON.stringify({ ev: "exit", handled, settle_errors: stats.settleErrors, reconnects: stats.reconnects }) + "\n");
  client.close();
  process.exitCode = code;
}

/**
 * With SPOOL_CONSUMER_CPU_PROF=FILE, a CPU profile of the consuming (from
 * the subscribe to the drain's end) goes to FILE, in the .cpuprofile format
 * of `node --cpu-prof` (which Node does not allow in NODE_OPTIONS).
 * @param {string | undefined} file
 * @returns {Promise<() => Promise<void>>}
 */
async function startProfile(file) {
  if (!file) return async () => {};
  const inspector = require("node:inspector");
  const session = new inspector.Session();
  session.connect();
  /** @param {string} method */
  const post = (method) => new Promise((resolve, reject) => session.post(method, (err, res) => (err ? reject(err) : resolve(res))));
  await post("Profiler.enable");
  await post("Profiler.start");
  return async () => {
    const res = /** @type {any} */ (await post("Profiler.stop"));
    require("node:fs").writeFileSync(file, JSON.stringify(res.profile));
    session.disconnect();
  };
}

main().catch((e) => { console.error("consumer:", e); process.exitCode = 2; });
