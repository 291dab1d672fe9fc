#!/usr/bin/env bash
# Makes sure redis-server (and redis-cli, redis-benchmark) are installed,
# from Debian's packages when they are missing, and libfaketime, which the
# tests that step a server's clock need (they skip without it, so failing to
# install it is no error). The tests and the demo start their own servers;
# nothing here starts one.
set -euo pipefail
have_redis=false
if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
  have_redis=true
fi
have_faketime=false
if ls /usr/lib/*/faketime/libfaketime.so.1 /usr/lib/faketime/libfaketime.so.1 >/dev/null 2>&1; then
  have_faketime=true
fi
if $have_redis && $have_faketime; then
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  if $have_redis; then exit 0; fi # (libfaketime: its tests skip)
  echo "redis-server is missing: install Redis 7 (e.g. 'brew install redis') and run again" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
updated=false
if ! $have_redis; then
  echo "installing redis-server from Debian's packages…" >&2
  $sudo apt-get update -qq
  updated=true
  $sudo apt-get install -y -qq --no-install-recommends redis-server redis-tools >/dev/null
fi
if ! $have_faketime; then
  # Never a password prompt for it: without root or password-less sudo, skip.
  if [ -n "$sudo" ]; then sudo="sudo -n"; fi
  if ! { $updated || $sudo apt-get update -qq >/dev/null 2>&1; } ||
    ! $sudo apt-get install -y -qq --no-install-recommends libfaketime >/dev/null 2>&1; then
    echo "libfaketime could not be installed: the tests that step a server's clock will skip" >&2
  fi
fi
