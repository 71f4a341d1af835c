// Build step after tsc: the ES module entry point. The SDK is compiled once,
// to CommonJS (dist/index.js); dist/index.mjs re-exports that same module's
// exports by name, and dist/index.d.mts its types. One copy of the code
// serves `import` and `require`, so a class (SpoolError, Retry ...) is the
// same object whichever way an app and its libraries load the SDK, and
// `instanceof` holds across them (no dual-package hazard). Node's ESM loader
// cannot list a CommonJS module's exports by itself for every form tsc
// emits, so the names are written out here, from the built module.
"use strict";
const fs = require("node:fs");
const path = require("node:path");

const dist = path.resolve(__dirname, "..", "dist");
const names = Object.keys(require(path.join(dist, "index.js"))).filter((n) => n !== "__esModule").sort();
if (names.length === 0) {
  console.error("esm: dist/index.js exports nothing: build it first (tsc -p tsconfig.build.json)");
  process.exit(1);
}
fs.writeFileSync(
  path.join(dist, "index.mjs"),
  "// The ES module entry point: the CommonJS build's exports (scripts/esm.js).\n" +
    'import sdk from "./index.js";\n\n' +
    `export const {\n${names.map((n) => `  ${n},`).join("\n")}\n} = sdk;\n`,
);
fs.writeFileSync(path.join(dist, "index.d.mts"), 'export * from "./index.js";\n');
