// The path a user takes: the tarball made by the documented command
// (`npm pack` in sdk/typescript), installed into a scratch project outside
// the repository, then an ES module worker and a CommonJS producer from
// there against a real spoold; the types checked for `import` and `require`.
import { strict as assert } from "node:assert";
import { execFile } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";

import { Node, PKG_DIR, REPO_DIR, tmpDir } from "./harness";

const VERSION = fs.readFileSync(path.join(REPO_DIR, "VERSION"), "utf8").trim();
const NPM = process.env.npm_execpath ? [process.execPath, process.env.npm_execpath] : ["npm"];

function run(cmd: string[], cwd: string, env: NodeJS.ProcessEnv = process.env, timeoutMs = 120_000): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    execFile(cmd[0]!, cmd.slice(1), { cwd, env, timeout: timeoutMs, maxBuffer: 16 << 20 }, (err, stdout, stderr) =>
      err ? reject(new Error(`${cmd.join(" ")} failed: ${err.message}\n${stdout}\n${stderr}`)) : resolve({ stdout, stderr }));
  });
}

const PRODUCER_CJS = `
const { Client } = require("@spoolmq/spool");
(async () => {
  const n = Number(process.argv[2]);
  const client = await Client.connect();
  const p = client.publisher("orders");
  const sent = [];
  for (let i = 0; i < n; i++) sent.push((await p.publish({ id: "m" + i, key: "k" + (i % 3), payload: "m" + i })).result);
  await Promise.all(sent);
  await p.close();
  await client.close();
  console.log("published", n);
})().catch((e) => { console.error(e); process.exit(1); });
`;

const WORKER_MJS = `
import { Client } from "@spoolmq/spool";
const n = Number(process.argv[2]);
const seen = new Set();
const client = await Client.connect();
for await (const m of client.messages({ group: "workers", topics: ["orders"], concurrency: 4 })) {
  console.log(m.id, m.attempt);
  m.ack();
  seen.add(m.id);
  if (seen.size === n) break; // ends the subscription: it drains
}
await client.close();
console.log("worker done");
`;

// One class object whichever way the SDK is loaded: no dual-package hazard.
const SAME_MJS = `
import { createRequire } from "node:module";
import * as esm from "@spoolmq/spool";
const cjs = createRequire(import.meta.url)("@spoolmq/spool");
const names = Object.keys(cjs).filter((k) => k !== "__esModule").sort();
if (JSON.stringify(Object.keys(esm).sort()) !== JSON.stringify(names)) throw new Error("ESM and CJS export different names");
for (const k of names) if (esm[k] !== cjs[k]) throw new Error(k + " differs between import and require");
console.log("same", names.length);
`;

const TYPES_MTS = `
import { Client, Retry, type Message } from "@spoolmq/spool";
export const connect: (addr?: string) => Promise<Client> = Client.connect;
export const handler = async (m: Message): Promise<void> => { if (m.attempt < 2) throw new Retry(100); };
`;
const TYPES_CTS = `
import spool = require("@spoolmq/spool");
export const connect: (addr?: string) => Promise<spool.Client> = spool.Client.connect;
export const handler = async (m: spool.Message): Promise<void> => { if (m.attempt < 2) throw new spool.Retry(100); };
`;

test("npm pack tarball installs outside the repository; ESM and CJS apps run against spoold", async () => {
  const scratch = tmpDir("pack");
  assert.ok(path.relative(REPO_DIR, scratch).startsWith(".."), "the scratch project must be outside the repository");
  await run([...NPM, "pack", "--pack-destination", scratch], PKG_DIR);
  const tgz = path.join(scratch, `spoolmq-spool-${VERSION}.tgz`);
  assert.ok(fs.existsSync(tgz), `no ${tgz}: ${fs.readdirSync(scratch).join(", ")}`);
  const files = (await run(["tar", "tzf", tgz], scratch)).stdout.split("\n");
  for (const f of ["dist/index.js", "dist/index.d.ts", "dist/index.mjs", "dist/index.d.mts", "proto/spool/v1/subscriber.proto"]) {
    assert.ok(files.includes(`package/${f}`), `${f} is missing from the tarball`);
  }
  const manifest = JSON.parse((await run(["tar", "xzf", tgz, "-O", "package/package.json"], scratch)).stdout);
  assert.equal(manifest.version, VERSION);
  assert.equal(manifest.scripts.prepare, undefined, "the tarball must carry no install-time script");
  assert.equal(JSON.parse(fs.readFileSync(path.join(PKG_DIR, "package.json"), "utf8")).scripts.prepare, "node scripts/prepare.js", "postpack restores prepare");

  // The app's project, as docs/sdk-typescript.md says: protobufjs's postinstall denied.
  const app = path.join(scratch, "app");
  fs.mkdirSync(app);
  fs.writeFileSync(path.join(app, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", private: true, allowScripts: { protobufjs: false } }));
  const inst = await run([...NPM, "install", "--no-audit", "--no-fund", tgz], app);
  assert.doesNotMatch(inst.stderr, /install-scripts|warn/i, "the install printed warnings");

  fs.writeFileSync(path.join(app, "same.mjs"), SAME_MJS);
  assert.match((await run([process.execPath, "same.mjs"], app)).stdout, /^same \d+/);

  fs.writeFileSync(path.join(app, "types.mts"), TYPES_MTS);
  fs.writeFileSync(path.join(app, "types.cts"), TYPES_CTS);
  const tsc = path.join(PKG_DIR, "node_modules", "typescript", "bin", "tsc");
  fs.writeFileSync(path.join(app, "tsconfig.json"), JSON.stringify({
    compilerOptions: { noEmit: true, strict: true, skipLibCheck: true, module: "node16", moduleResolution: "node16", target: "es2022", types: [] },
    files: ["types.mts", "types.cts"],
  }));
  await run([process.execPath, tsc, "-p", app], app);

  const n = await Node.start(`
topics:
  - name: orders
    partitions: 4
subscriptions:
  - topic: orders
    group: workers
    backoff: {base: 20ms, max: 200ms, multiplier: 2}
`);
  try {
    fs.writeFileSync(path.join(app, "producer.cjs"), PRODUCER_CJS);
    fs.writeFileSync(path.join(app, "worker.mjs"), WORKER_MJS);
    const env = { ...process.env, SPOOL_ADDR: n.app, NODE_PATH: "" };
    const count = 20;
    assert.match((await run([process.execPath, "producer.cjs", String(count)], app, env, 30_000)).stdout, new RegExp(`^published ${count}$`, "m"));
    const out = (await run([process.execPath, "worker.mjs", String(count)], app, env, 30_000)).stdout.trim().split("\n");
    assert.equal(out.at(-1), "worker done", out.join("\n"));
    const ids = out.slice(0, -1).map((l) => l.split(" ")[0]).sort();
    assert.deepEqual(ids, Array.from({ length: count }, (_, i) => `m${i}`).sort());
  } finally {
    await n.kill();
  }
});

test("npm install of the SDK's folder builds it (prepare) and works for import and require", async () => {
  // A fresh checkout's copy: no node_modules, dist or generated files.
  const scratch = tmpDir("pathinstall");
  const checkout = path.join(scratch, "spool");
  const skip = new Set(["node_modules", "dist", "build", "gen", "proto"]);
  fs.cpSync(path.join(REPO_DIR, "proto", "spool", "v1"), path.join(checkout, "proto", "spool", "v1"), { recursive: true });
  fs.copyFileSync(path.join(REPO_DIR, "VERSION"), path.join(checkout, "VERSION"));
  fs.cpSync(PKG_DIR, path.join(checkout, "sdk", "typescript"), {
    recursive: true,
    filter: (src) => !(skip.has(path.basename(src)) && path.dirname(src).startsWith(PKG_DIR)) && !src.endsWith(".tgz"),
  });
  assert.ok(!fs.existsSync(path.join(checkout, "sdk", "typescript", "node_modules")));

  const app = path.join(scratch, "app");
  fs.mkdirSync(app);
  fs.writeFileSync(path.join(app, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", private: true }));
  await run([...NPM, "install", "--no-audit", "--no-fund", path.join(checkout, "sdk", "typescript")], app);
  fs.writeFileSync(path.join(app, "same.mjs"), SAME_MJS);
  assert.match((await run([process.execPath, "same.mjs"], app)).stdout, /^same \d+/);
});
