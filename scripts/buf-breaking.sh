#!/usr/bin/env bash
# buf breaking: proto/ must stay compatible (buf's FILE rules: wire, JSON and
# generated code) with the protos it replaces. The base is, in order:
#   - on a branch: its merge base with main (what the branch would change);
#   - on main itself: main before its last commit or merge (HEAD^1);
#   - without a main branch: the last tag.
# Without the history to find a base (a shallow clone, no main, no tag) it
# says so and skips: CI clones fully.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
export PATH="$PWD/.tools/bin:$PATH"
skip() { echo "buf breaking: skipped: $1"; exit 0; }
git rev-parse -q --verify HEAD >/dev/null || skip "no commit yet"
if [ "$(git rev-parse --is-shallow-repository)" = true ]; then
  skip "this is a shallow clone, so there is no history to compare proto/ with (git fetch --unshallow to run it; CI clones fully)"
fi
base=""
if main=$(git rev-parse -q --verify 'refs/heads/main^{commit}' || git rev-parse -q --verify 'refs/remotes/origin/main^{commit}'); then
  if [ "$(git rev-parse HEAD)" = "$main" ]; then
    base=$(git rev-parse -q --verify 'HEAD^1' || true)
    what="main before its last commit (${base:0:12})"
  else
    base=$(git merge-base HEAD "$main" || true)
    what="the merge base with main (${base:0:12})"
  fi
elif tag=$(git describe --tags --abbrev=0 2>/dev/null); then
  base=$tag
  what="the last tag $tag"
fi
[ -n "$base" ] || skip "no main branch, merge base or tag to compare proto/ with"
command -v buf >/dev/null || { echo "buf breaking: buf is not installed: run 'make tools'"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The base's buf.yaml and proto/ as files: works in worktrees and clones alike.
if ! git archive "$base" -- buf.yaml proto | tar -x -C "$tmp" 2>/dev/null; then
  skip "$what has no buf.yaml and proto/ to compare with"
fi
echo "buf breaking: proto/ against $what"
if ! buf breaking --against "$tmp"; then
  echo "buf breaking: the changes above break clients of the protos in $what: keep field numbers, names and types (reserve removed ones), add new fields instead, or make a new package version (spool.v2)"
  exit 1
fi
