// `npm pack` runs `prepack` and `postpack` around the packing: `strip` takes
// the `prepare` script out of package.json so the tarball does not carry it
// (an install from the tarball has nothing to build, and npm would list the
// script among those the app has not allowed), `restore` puts it back. The
// same pattern as pinst's for husky's postinstall. `npm run build` restores
// too (a no-op when `prepare` is there), so a pack cut short between the two
// leaves package.json changed only until the next build.
"use strict";
const fs = require("node:fs");
const path = require("node:path");

const file = path.resolve(__dirname, "..", "package.json");
const PREPARE = "node scripts/prepare.js";
const pkg = JSON.parse(fs.readFileSync(file, "utf8"));
const mode = process.argv[2];
if (mode === "strip") {
  delete pkg.scripts.prepare;
} else if (mode === "restore") {
  if (pkg.scripts.prepare === PREPARE) process.exit(0);
  // Rebuilt in the key order of the committed file: prepare after test.
  const scripts = {};
  for (const [k, v] of Object.entries(pkg.scripts)) {
    scripts[k] = v;
    if (k === "test") scripts.prepare = PREPARE;
  }
  pkg.scripts = scripts;
} else {
  console.error("usage: node scripts/manifest.js strip|restore");
  process.exit(2);
}
fs.writeFileSync(file, JSON.stringify(pkg, null, 2) + "\n");
