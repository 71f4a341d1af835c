// The README's example runs as written against `spoold --dev`.
import { strict as assert } from "node:assert";
import { execFile } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";

import { Node, PKG_DIR } from "./harness";

test("README example runs against spoold --dev", async () => {
  const readme = fs.readFileSync(path.join(PKG_DIR, "README.md"), "utf8");
  const code = /```js\n([\s\S]*?)```/.exec(readme)?.[1];
  assert.ok(code, "no ```js block in README.md");
  assert.ok(code.split("\n").filter(Boolean).length <= 14, "the example grew beyond ~10 lines");
  // Inside the package directory, so that "@spoolmq/spool" resolves to this build.
  const file = path.join(PKG_DIR, "build", "readme-example.mjs");
  fs.writeFileSync(file, code);
  const n = await Node.dev();
  try {
    const out = await new Promise<string>((resolve, reject) => {
      execFile(process.execPath, [file], { env: { ...process.env, SPOOL_ADDR: n.app }, timeout: 20_000 }, (err, stdout, stderr) =>
        err ? reject(new Error(`example failed: ${err.message}\n${stdout}\n${stderr}`)) : resolve(stdout));
    });
    assert.match(out, /^order-1001 hello attempt 2$/m);
  } finally {
    await n.kill();
  }
});
