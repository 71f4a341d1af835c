// Drain on SIGTERM of the application process: running handlers finish and
// are acked, prefetched deliveries are released without counting an
// attempt, nothing is lost or half-done.
import { strict as assert } from "node:assert";
import { spawn } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";

import { Client } from "@spoolmq/spool";
import { Node, eventually, tmpDir } from "./harness";

function lines(file: string): string[][] {
  try {
    return fs.readFileSync(file, "utf8").split("\n").filter(Boolean).map((l) => l.split(" "));
  } catch {
    return [];
  }
}

function startApp(addr: string, record: string, holdMs: number) {
  const p = spawn(process.execPath, [path.join(__dirname, "drainapp.js"), addr, record, String(holdMs)], { stdio: ["ignore", "inherit", "inherit"] });
  const exited = new Promise<number | null>((r) => p.once("exit", (code) => r(code)));
  return { p, exited };
}

test("SIGTERM drains: in-flight finish and are acked, prefetched released uncounted, nothing lost", async () => {
  const n = await Node.start(`
topics:
  - name: orders
    partitions: 4
subscriptions:
  - topic: orders
    group: workers
    max_attempts: 5
    visibility_timeout: 30s
    ordering: none
`);
  const c = await Client.connect(n.app);
  const dir = tmpDir("drain");
  try {
    const ids = [...Array(40).keys()].map((i) => `d-${i}`);
    await c.publishBatch("orders", ids.map((id) => ({ id, payload: id })));

    const rec1 = path.join(dir, "run1");
    const a1 = startApp(n.app, rec1, 400);
    await eventually("four handlers running in the first app", () => lines(rec1).filter((l) => l[0] === "start").length >= 4);
    a1.p.kill("SIGTERM");
    const code = await Promise.race([a1.exited, new Promise<string>((r) => setTimeout(() => r("timeout"), 15_000))]);
    assert.equal(code, 0, "the app did not exit 0 after SIGTERM");
    const run1 = lines(rec1);
    assert.deepEqual(run1.at(-1), ["exit"]);
    const started1 = run1.filter((l) => l[0] === "start").map((l) => l[1]!);
    const done1 = new Set(run1.filter((l) => l[0] === "done").map((l) => l[1]!));
    assert.ok(started1.length >= 4 && started1.length < ids.length, `first run started ${started1.length}`);
    for (const id of started1) assert.ok(done1.has(id), `${id} started and not finished before exit (half-done)`);

    const rec2 = path.join(dir, "run2");
    const a2 = startApp(n.app, rec2, 5);
    await eventually("every message done across both runs", () => {
      const done2 = lines(rec2).filter((l) => l[0] === "done").map((l) => l[1]!);
      return ids.every((id) => done1.has(id) || done2.includes(id));
    });
    a2.p.kill("SIGTERM");
    assert.equal(await a2.exited, 0);
    const run2 = lines(rec2).filter((l) => l[0] === "start");
    for (const [, id, attempt] of run2) {
      assert.ok(!done1.has(id!), `${id} was finished and acked in the first run but delivered again`);
      assert.equal(attempt, "1", `${id} came back with attempt ${attempt}: a release counted an attempt`);
    }
    assert.equal(done1.size + new Set(run2.map((l) => l[1])).size, ids.length, "messages lost or duplicated");
  } finally {
    c.close();
    await n.kill();
  }
});
