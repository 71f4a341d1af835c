#!/usr/bin/env bash
# Installs what `make test` needs and a fresh machine may lack. Idempotent.
# The tests start their own redis-server processes on free ports (single
# servers, a Cluster, a sentinel via `redis-server --sentinel`); redis-cli
# (redis-tools) creates the test Cluster.
set -euo pipefail
pkgs=()
command -v redis-server >/dev/null 2>&1 || pkgs+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || pkgs+=(redis-tools)
if [ ${#pkgs[@]} -gt 0 ]; then
  echo "installing ${pkgs[*]} from Debian's packages (the tests start their own on a free port)"
  if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${pkgs[@]}" >/dev/null
fi
