// npm's `prepare`: runs on `npm install` / `npm ci` in this folder and when
// an app installs the SDK by path (`npm install ./sdk/typescript`). npm links
// a folder without installing the folder's own dependencies, so the build
// tools are missing there: this installs them from the committed lockfile
// first (scripts off: their only install script is protobufjs's postinstall,
// which checks a version scheme and changes nothing), then builds dist/.
// The packed tarball carries no `prepare` (scripts/manifest.js): an install
// from it has nothing to build.
"use strict";
const fs = require("node:fs");
const path = require("node:path");
const { execFileSync } = require("node:child_process");

const root = path.resolve(__dirname, "..");
const npm = process.env.npm_execpath
  ? [process.execPath, process.env.npm_execpath]
  : [process.platform === "win32" ? "npm.cmd" : "npm"];
const run = (args) => execFileSync(npm[0], [...npm.slice(1), ...args], { cwd: root, stdio: "inherit" });

if (!fs.existsSync(path.join(root, "node_modules", "typescript", "package.json"))) {
  run(["ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"]);
}
run(["run", "--silent", "build"]);
