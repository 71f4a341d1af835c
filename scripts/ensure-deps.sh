#!/usr/bin/env bash
# Installs what `make test` needs and a fresh machine may lack. Idempotent.
# The tests start their own redis-server processes on free ports (single
# servers, a Cluster, a sentinel via `redis-server --sentinel`); redis-cli
# (redis-tools) creates the test Cluster.
set -euo pipefail
pkgs=()
command -v redis-server >/dev/null 2>&1 || pkgs+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || pkgs+=(redis-tools)
# The TypeScript SDK's idempotent() tests start a throwaway PostgreSQL server.
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || pkgs+=(postgresql)
# The Java SDK's tests build it with Maven and a JDK (17 or later).
command -v javac >/dev/null 2>&1 || pkgs+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || pkgs+=(maven)
# The JetStream backend's tests start nats-server, built from the module
# go.mod pins (a tool dependency) into the cache dir internal/testnats uses.
# Building it here keeps test packages from building it at once; without a
# module proxy the tests skip, saying so.
nats_version=$(go list -m -f '{{.Version}}' github.com/nats-io/nats-server/v2)
nats_bin="${XDG_CACHE_HOME:-$HOME/.cache}/spool/nats-server-$nats_version"
if [ ! -x "$nats_bin" ]; then
  echo "building nats-server $nats_version into $nats_bin (the JetStream backend's tests start it)"
  mkdir -p "$(dirname "$nats_bin")"
  go build -o "$nats_bin.tmp" github.com/nats-io/nats-server/v2 && mv "$nats_bin.tmp" "$nats_bin" ||
    echo "ensure-deps: could not build nats-server; the JetStream tests will try again and skip if they cannot" >&2
fi
# The Kafka backend's tests start an Apache Kafka broker from the jars
# internal/testkafka/pom.xml names (org.apache.kafka:kafka_2.13 and its
# runtime dependencies), copied once from Maven Central into the cache dir
# internal/testkafka uses. Needs java and mvn (installed below if missing,
# so this runs again at the end); without them the tests skip, saying so.
fetch_kafka() {
  local dir="$(dirname "$0")/../internal/testkafka"
  local version
  version=$(grep -A1 '<artifactId>kafka-broker</artifactId>' "$dir/pom.xml" | sed -n 's:.*<version>\(.*\)</version>.*:\1:p')
  local libs="${XDG_CACHE_HOME:-$HOME/.cache}/spool/kafka-$version/libs"
  [ -f "$libs/kafka_2.13-$version.jar" ] && return 0
  command -v mvn >/dev/null 2>&1 || return 0
  echo "copying Apache Kafka $version's jars into $libs (the Kafka backend's tests start a broker)"
  mkdir -p "$(dirname "$libs")"
  local tmp
  tmp=$(mktemp -d "$(dirname "$libs")/fetch-XXXXXX")
  if mvn -q -B -f "$dir/pom.xml" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp/libs" >"$tmp/mvn.log" 2>&1 &&
    mv "$tmp/libs" "$libs"; then
    rm -rf "$tmp"
  else
    tail -20 "$tmp/mvn.log" >&2
    rm -rf "$tmp"
    echo "ensure-deps: could not copy Kafka's jars; the Kafka tests will try again and skip if they cannot" >&2
  fi
}
fetch_kafka
[ ${#pkgs[@]} -eq 0 ] && exit 0

echo "installing ${pkgs[*]} from Debian's packages (the tests start their own servers on free ports)"
if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
# Keep the package from starting its own service (there may be no init
# system, and the tests need none): the usual policy-rc.d for containers.
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
  $SUDO chmod +x "$policy"
  made_policy=1
fi
trap '[ "$made_policy" = 1 ] && $SUDO rm -f "$policy"' EXIT
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { echo "ensure-deps: PostgreSQL is still missing after installing ${pkgs[*]}; install it by hand (apt-get install postgresql)" >&2; exit 1; }
for b in redis-server redis-cli; do
  command -v "$b" >/dev/null 2>&1 || { echo "ensure-deps: $b is still missing after installing ${pkgs[*]}; install it by hand (apt-get install redis-server redis-tools)" >&2; exit 1; }
done
for b in javac mvn; do
  command -v "$b" >/dev/null 2>&1 || { echo "ensure-deps: $b is still missing after installing ${pkgs[*]}; install it by hand (apt-get install openjdk-17-jdk-headless maven)" >&2; exit 1; }
done
fetch_kafka
