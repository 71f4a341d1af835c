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
# The sidecar (and the commands above it) see only the engine's own API.
# The storage backends that implement it (engine/embedded, engine/cluster,
# engine/jetstream, engine/kafka) are opened in one place, sidecar/backend.go;
# tests may open the embedded log, and `spoold repair` repairs its files. No
# other subpackage of engine is reached from above.
if git grep -n -E '"github.com/spoolmq/spool/engine/' -- 'sidecar/*.go' 'cmd/*.go' 'loadtest/*.go' \
  | grep -v -E '^sidecar/backend\.go:[0-9]+:\s*"github.com/spoolmq/spool/engine/(embedded|cluster|jetstream|kafka)"$' \
  | grep -v -E '^(sidecar/[^:]*_test\.go|cmd/spoold/repair\.go):[0-9]+:\s*"github.com/spoolmq/spool/engine/embedded"$'; then
  echo "banned: sidecar/, cmd/ and loadtest/ import github.com/spoolmq/spool/engine only (sidecar/backend.go also the backends engine/embedded, engine/cluster, engine/jetstream and engine/kafka; tests and cmd/spoold/repair.go engine/embedded), never its other subpackages"; fail=1
fi
# Package engine is the API only, and the broker backends depend on it alone:
# none of them links Spool's own log or its replication (raft, the transport,
# the controller's state machine). The single node links no replication
# either: that is engine/cluster's.
if deps=$(go list -deps ./engine ./engine/kafka ./engine/jetstream) && \
  echo "$deps" | grep -E '^(github.com/spoolmq/spool/engine/(embedded|cluster|raft|transport|meta)|go\.etcd\.io/raft)'; then
  echo "banned: engine, engine/kafka and engine/jetstream must not depend on engine/embedded, engine/cluster, engine/raft, engine/transport, engine/meta or etcd raft (go list -deps)"; fail=1
fi
if deps=$(go list -deps ./engine/embedded) && \
  echo "$deps" | grep -E '^(github.com/spoolmq/spool/engine/(cluster|raft|transport|meta)|go\.etcd\.io/raft)'; then
  echo "banned: engine/embedded (the single node) must not depend on engine/cluster, engine/raft, engine/transport, engine/meta or etcd raft (go list -deps)"; fail=1
fi
# The delivery machine is pure (sidecar/deliver/doc.go, "Machine and driver"):
# its files start no goroutine, hold no channel, lock nothing and read no
# clock. The list is explicit: a new machine file is added here on purpose.
# A `go` statement is `go` at the start of a statement (not in prose or
# strings); comment lines are left out.
deliver_machine=(machine.go faults.go events.go consumer.go member.go fence.go commit.go deadletter.go ledger.go breakers.go budget.go spans.go snapshot.go observe.go)
for f in "${deliver_machine[@]}"; do
  [ -f "sidecar/deliver/$f" ] || { echo "banned.sh: machine file sidecar/deliver/$f is gone: update the list"; fail=1; }
done
if (cd sidecar/deliver && grep -n -H -E '(^[[:space:]]*|[{;][[:space:]]*)go[[:space:]]+[[:alnum:]_(]|\bchan\b|\bsync\.|\btime\.Now\b' -- "${deliver_machine[@]}") | grep -v -E '^[^:]+:[0-9]+:[[:space:]]*//'; then
  echo "banned: a go statement, chan, sync. or time.Now in a machine file of sidecar/deliver (listed in scripts/banned.sh): move it to the driver (group.go and the files doc.go names)"; fail=1
fi
# Nor do they log or touch Prometheus: they record observations as data
# (observe.go) that the driver publishes (report.go).
if (cd sidecar/deliver && grep -n -H -E 'client_golang/prometheus|"github.com/spoolmq/spool/sidecar/metrics"|\bslog\.(Debug|Info|Warn|Error|Log|New|Default)\b|\.log\.(Debug|Info|Warn|Error|Log)\(' -- "${deliver_machine[@]}") | grep -v -E '^[^:]+:[0-9]+:[[:space:]]*//'; then
  echo "banned: logging or metrics in a machine file of sidecar/deliver: record it with m.note, m.count or m.gauge (observe.go); the driver publishes it"; fail=1
fi
# The Go SDK and the generated API are modules of their own so that an app's
# module graph holds only what a client needs: never the server's module, its
# consensus, broker, Redis or metrics libraries (sdk/installtest checks the same
# from an app's module built against the SDK).
server_deps='^(github\.com/spoolmq/spool|go\.etcd\.io/raft/v3|github\.com/twmb/franz-go|github\.com/nats-io/nats\.go|github\.com/redis/go-redis/v9|github\.com/prometheus/client_golang)( |$)'
for m in proto sdk/go; do
  if (cd "$m" && go list -m all) | grep -E "$server_deps"; then
    echo "banned: the module $m requires the server or a server-only library (above): a client must not pull them"; fail=1
  fi
done
# No function over 120 lines outside tests and generated code, but those
# scripts/funclen-allow.txt lists with a reason (and it lists only those).
if ! go run ./scripts/funclen; then
  echo "banned: functions over 120 lines (scripts/funclen): split them, or list one in scripts/funclen-allow.txt with the reason"; fail=1
fi
exit $fail
