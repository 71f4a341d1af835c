#!/usr/bin/env bash
# buf breaking: proto/ must stay compatible (buf's FILE rules: wire, JSON and
# generated code) with the protos it replaces. The base is, in order:
#   - on a branch: its merge base with main (what the branch would change);
#   - on main itself: main before its last commit or merge (HEAD^1);
#   - without a main branch: the last tag.
# The peer protocol (proto/spool/cluster/v1) is checked a second time,
# against the last release RELEASES names: nodes of that release and of this
# tree run side by side during a rolling upgrade (docs/upgrading.md).
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
command -v buf >/dev/null || { echo "buf breaking: buf is not installed: run 'make tools'"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The peer protocol against the last release.
release=$(grep -v '^#' RELEASES | awk 'NF == 2 { v = $1; c = $2 } END { if (c != "") print v " " c }')
if [ -z "$release" ]; then
  echo "buf breaking: no release in RELEASES yet: the peer protocol has nothing to stay compatible with"
elif ! git cat-file -e "${release#* }^{commit}" 2>/dev/null; then
  echo "buf breaking: skipped for the peer protocol: release ${release% *}'s commit ${release#* } is not in this clone (git fetch --unshallow; CI clones fully)"
else
  commit=${release#* }
  # buf reads the release's protos from this repository's history (its
  # clone of it goes deep enough to reach the commit).
  depth=$(( $(git rev-list --count "$commit..HEAD") + 1 ))
  echo "buf breaking: proto/spool/cluster/v1 (the peer protocol) against release ${release% *} (${commit:0:12})"
  if ! buf breaking --against ".git#ref=$commit,depth=$depth" --path proto/spool/cluster/v1; then
    echo "buf breaking: the changes above break the peer protocol of release ${release% *}, whose nodes run beside this tree's during a rolling upgrade: add fields and messages instead (docs/upgrading.md), and keep new behaviour behind the cluster version"
    exit 1
  fi
fi

[ -n "$base" ] || skip "no main branch, merge base or tag to compare proto/ with"
# The base's buf.yaml and proto/ as files: works in worktrees and clones alike.
if ! git archive "$base" -- buf.yaml proto | tar -x -C "$tmp" 2>/dev/null; then
  skip "$what has no buf.yaml and proto/ to compare with"
fi
echo "buf breaking: proto/ against $what"
if ! buf breaking --against "$tmp"; then
  echo "buf breaking: the changes above break clients of the protos in $what: keep field numbers, names and types (reserve removed ones), add new fields instead, or make a new package version (spool.v2)"
  exit 1
fi
