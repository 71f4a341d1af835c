#!/usr/bin/env bash
# Runs every Go fuzz target of the repository, one after another, each for
# FUZZTIME (default 30s) with one worker (the machine is shared). The seed
# corpora under testdata/fuzz run in plain `go test` already; this explores
# past them. A crasher is written to the target's testdata/fuzz directory:
# commit it with the fix, as a regression seed. FUZZ narrows the run to the
# targets whose name matches a regexp (FUZZ=HostStep make fuzz).
# FUZZMINIMIZETIME (default 5s) bounds the minimizing of each new input
# that widens coverage: go test's default of 60s takes a whole short run
# while no input is tried. Each package's fuzzing test binary is built once
# and runs each of its targets (go test -fuzz would build and link it again
# for every target), with go test's own corpus cache.
set -euo pipefail
fuzztime=${FUZZTIME:-30s}
minimize=${FUZZMINIMIZETIME:-5s}
only=${FUZZ:-.}
go=${GO:-go}
cache=$($go env GOCACHE)/fuzz
bins=$(mktemp -d)
trap 'rm -rf "$bins"' EXIT
failed=()
# Each package with fuzz targets, and its targets, from the test files.
while read -r dir; do
  names=()
  for name in $(git grep -h -o -E '^func Fuzz[A-Za-z0-9_]+' -- ":(glob)$dir/*_test.go" | sed 's/^func //' | sort -u); do
    [[ $name =~ $only ]] && names+=("$name")
  done
  ((${#names[@]})) || continue
  bin="$bins/$(echo "$dir" | tr / _).test"
  # The package's module: the closest directory above it with a go.mod
  # (proto/ and sdk/go are modules of their own).
  mod=$dir
  while [[ $mod != . && ! -f $mod/go.mod ]]; do mod=$(dirname "$mod"); done
  rel=./${dir#"$mod"}; rel=${rel/#.\/\//./}
  [[ $mod == . ]] && rel=./$dir
  pkg=$(cd "$mod" && $go list "$rel")
  if ! (cd "$mod" && $go test -c -fuzz=. -o "$bin" "$rel"); then
    failed+=("./$dir (build)")
    continue
  fi
  for name in "${names[@]}"; do
    echo "== ./$dir $name ($fuzztime)"
    if ! (cd "$dir" && "$bin" -test.run '^$' -test.fuzz "^${name}\$" -test.fuzztime "$fuzztime" \
      -test.fuzzminimizetime "$minimize" -test.parallel 1 -test.fuzzcachedir "$cache/$pkg"); then
      failed+=("./$dir $name")
    fi
  done
done < <(git grep -l -E '^func Fuzz' -- '*_test.go' | xargs -n1 dirname | sort -u)
if ((${#failed[@]})); then
  printf 'fuzz: failed: %s\n' "${failed[@]}"
  exit 1
fi
