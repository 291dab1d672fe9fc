#!/usr/bin/env bash
# Counts the library's code lines as docs/design.md reports them: Go lines that are not blank and not only a comment,
# in the non-test files of the root package, driver/ (not its conformance table) and internal/ (not its test tooling:
# leakcheck, redisserver, redistest, testopt, torture), leaving out generated files and generators (go generate's
# digests), and Lua lines that are not blank and not only a comment.
# VERBOSE=1 prints each file's count.
set -euo pipefail
cd "$(dirname "$0")/.."
count() { grep -v '^[[:space:]]*$' "$1" | grep -cv "^[[:space:]]*$2" || true; }
total=0
for f in $(ls ./*.go driver/*.go internal/{backend,goredisdriver,pubsub,script}/*.go | grep -v '_test\.go$'); do
	if grep -q -e '^// Code generated' -e '^//go:build ignore' "$f"; then
		continue
	fi
	n=$(count "$f" //)
	total=$((total + n))
	[[ -n "${VERBOSE:-}" ]] && echo "$n $f"
done
lua=0
for f in internal/script/*.lua; do
	lua=$((lua + $(count "$f" --)))
done
echo "Go $total"
echo "Lua $lua"
