#!/usr/bin/env bash
# Conventions that are checks: fail on patterns the project banned.
set -euo pipefail
fail=0
# time.Sleep in tests: await a condition instead (testutil.Eventually). Benchmarks and
# fault-injection helpers that must sleep say so with a "sleep-ok" comment on the line.
if git grep -n 'time\.Sleep' -- '*_test.go' | grep -v 'sleep-ok'; then
  echo "banned: time.Sleep in tests; await the condition instead (or mark a justified one with // sleep-ok: why)"; fail=1
fi
# The same in the Java SDK's tests (Thread.sleep): await the condition (Eventually.await).
if git grep -n 'Thread\.sleep' -- 'sdk/java/src/test/*.java' | grep -v 'sleep-ok'; then
  echo "banned: Thread.sleep in sdk/java tests; await the condition instead (Eventually.await), or mark the handler's simulated work with // sleep-ok: why"; fail=1
fi
# The engine never imports the sidecar, Redis or Prometheus.
if git grep -n -E '"github.com/spoolmq/spool/sidecar|"github.com/redis/|"github.com/prometheus/' -- 'engine/*.go'; then
  echo "banned: engine/ must not import sidecar, Redis or Prometheus"; fail=1
fi
# The sidecar (and the commands above it) see only the engine's own API. One
# file names the storage backends to open them (storage.backend):
# sidecar/backend.go; everything else sees an engine.Backend.
if git grep -n -E '"github.com/spoolmq/spool/engine/' -- 'sidecar/*.go' 'cmd/*.go' 'loadtest/*.go' ':!sidecar/backend.go'; then
  echo "banned: sidecar/, cmd/ and loadtest/ import github.com/spoolmq/spool/engine only, never its subpackages"; fail=1
fi
exit $fail
