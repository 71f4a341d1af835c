#!/usr/bin/env bash
# Installs what `make test` needs and a fresh machine may lack. Idempotent.
set -euo pipefail
if ! command -v redis-server >/dev/null 2>&1; then
  echo "installing redis-server from Debian's packages (the tests start their own on a free port)"
  if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server >/dev/null
fi
