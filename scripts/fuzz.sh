#!/usr/bin/env bash
# Runs every Go fuzz target of the repository, one after another, each for
# FUZZTIME (default 30s) with one worker (the machine is shared). The seed
# corpora under testdata/fuzz run in plain `go test` already; this explores
# past them. A crasher is written to the target's testdata/fuzz directory:
# commit it with the fix, as a regression seed. FUZZ narrows the run to the
# targets whose name matches a regexp (FUZZ=HostStep make fuzz).
# FUZZMINIMIZETIME (default 5s) bounds the minimizing of each new input
# that widens coverage: go test's default of 60s takes a whole short run
# while no input is tried.
set -euo pipefail
fuzztime=${FUZZTIME:-30s}
minimize=${FUZZMINIMIZETIME:-5s}
only=${FUZZ:-.}
go=${GO:-go}
failed=()
# Each package with fuzz targets, and its targets, from the test files.
while read -r dir; do
  for name in $(git grep -h -o -E '^func Fuzz[A-Za-z0-9_]+' -- ":(glob)$dir/*_test.go" | sed 's/^func //' | sort -u); do
    [[ $name =~ $only ]] || continue
    echo "== ./$dir $name ($fuzztime)"
    # The package's module: the closest directory above it with a go.mod
    # (proto/ and sdk/go are modules of their own).
    mod=$dir
    while [[ $mod != . && ! -f $mod/go.mod ]]; do mod=$(dirname "$mod"); done
    pkg=./${dir#"$mod"}; pkg=${pkg/#.\/\//./}
    [[ $mod == . ]] && pkg=./$dir
    if ! (cd "$mod" && $go test "$pkg" -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -fuzzminimizetime "$minimize" -parallel 1); then
      failed+=("./$dir $name")
    fi
  done
done < <(git grep -l -E '^func Fuzz' -- '*_test.go' | xargs -n1 dirname | sort -u)
if ((${#failed[@]})); then
  printf 'fuzz: failed: %s\n' "${failed[@]}"
  exit 1
fi
