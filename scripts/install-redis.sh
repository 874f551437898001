#!/usr/bin/env bash
# Installs the Redis server, Sentinel and CLI from Debian's packages if any is
# missing. The tests start their own servers; nothing is started here.
set -euo pipefail
missing=0
for bin in redis-server redis-sentinel redis-cli; do
  command -v "$bin" >/dev/null 2>&1 || missing=1
done
if [ "$missing" = 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "redis-server, redis-sentinel and redis-cli are needed: run as root, or" >&2
  echo "  sudo apt-get install redis-server redis-sentinel redis-tools" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq redis-server redis-sentinel redis-tools >/dev/null
redis-server --version
