// Build step: copy the protocol from the repository's proto/ into the
// package (so `npm pack` is self-contained: the SDK loads these files at
// run time) and generate TypeScript types for them into src/gen.
"use strict";
const fs = require("node:fs");
const path = require("node:path");
const { execFileSync } = require("node:child_process");

const root = path.resolve(__dirname, "..");
const repoProto = path.resolve(root, "../../proto/spool/v1");
const pkgProto = path.join(root, "proto/spool/v1");

// The package's version is the repository's VERSION (the one version of
// every Spool artifact): a build from a checkout refuses a package.json that
// says otherwise. (npm reads the version from package.json only.)
const versionFile = path.resolve(root, "../../VERSION");
if (fs.existsSync(versionFile)) {
  const want = fs.readFileSync(versionFile, "utf8").trim();
  const have = require(path.join(root, "package.json")).version;
  if (have !== want) {
    console.error(`gen: package.json has version ${have}, the repository's VERSION is ${want}: set "version": "${want}" in sdk/typescript/package.json (and npm install to update the lockfile)`);
    process.exit(1);
  }
}

// A clean dist: nothing left from an earlier build goes into the package.
fs.rmSync(path.join(root, "dist"), { recursive: true, force: true });

if (fs.existsSync(repoProto)) {
  fs.rmSync(pkgProto, { recursive: true, force: true });
  fs.mkdirSync(pkgProto, { recursive: true });
  for (const f of fs.readdirSync(repoProto).filter((f) => f.endsWith(".proto")).sort()) {
    fs.copyFileSync(path.join(repoProto, f), path.join(pkgProto, f));
  }
} else if (!fs.existsSync(pkgProto)) {
  console.error(`gen: neither ${repoProto} nor ${pkgProto} exists: build the SDK from a checkout of the Spool repository`);
  process.exit(1);
}

const files = fs.readdirSync(pkgProto).filter((f) => f.endsWith(".proto")).sort().map((f) => path.join("spool/v1", f));
const out = path.join(root, "src/gen");
fs.rmSync(out, { recursive: true, force: true });
// The options must match LOADER_OPTIONS in src/proto.ts.
execFileSync(process.execPath, [
  require.resolve("@grpc/proto-loader/build/bin/proto-loader-gen-types.js"),
  "--longs=String", "--enums=String", "--defaults", "--oneofs", "--includeComments",
  "--grpcLib=@grpc/grpc-js", "-I", path.join(root, "proto"), "-O", out, ...files,
], { stdio: "inherit" });
