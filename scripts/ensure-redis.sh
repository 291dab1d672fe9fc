#!/usr/bin/env bash
# Makes sure redis-server (and redis-cli, redis-benchmark) are installed,
# from Debian's packages when they are missing. The tests and the demo start
# their own servers; nothing here starts one.
set -euo pipefail
if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "redis-server is missing: install Redis 7 (e.g. 'brew install redis') and run again" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
echo "installing redis-server from Debian's packages…" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends redis-server redis-tools >/dev/null
