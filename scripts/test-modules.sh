#!/usr/bin/env bash
# Runs `go test` in several of the repository's modules side by side, at most $JOBS at a time (3 by default), and
# prints each module's output whole as it ends, with how long it took. Fails if any of them failed.
#
# Usage: test-modules.sh GO-TEST-FLAGS... -- DIR[:ARGS]...
#   DIR is a module's directory; ARGS (default ./...) the packages and test-binary flags for it, split at spaces.
#   Give the longest first: they start in the order given.
set -uo pipefail
cd "$(dirname "$0")/.."

flags=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do flags+=("$1"); shift; done
[ $# -gt 0 ] && shift
jobs_max=${JOBS:-3}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

one() {
  local dir=$1 args=$2 log=$3 start=$SECONDS rc
  # shellcheck disable=SC2086 # ARGS is a list of words
  (cd "$dir" && "${GO:-go}" test "${flags[@]}" $args) >"$log" 2>&1
  rc=$?
  { cat "$log"; echo "== $dir: $( [ $rc -eq 0 ] && echo ok || echo FAILED ) in $((SECONDS - start))s"; } >"$log.done"
  return $rc
}

failed=0
n=0
pids=()
printed=()
flush() { # the output of each module that ended and was not printed yet
  local f
  for f in "$logs"/*.done; do
    [ -e "$f" ] || continue
    case " ${printed[*]-} " in *" $f "*) continue ;; esac
    cat "$f"
    printed+=("$f")
  done
}
for entry in "$@"; do
  dir=${entry%%:*}
  args=./...
  [ "$entry" != "$dir" ] && args=${entry#*:}
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do
    wait -n
    flush
  done
  n=$((n + 1))
  one "$dir" "$args" "$logs/$n.log" &
  pids+=($!)
done
while [ "$(jobs -rp | wc -l)" -gt 0 ]; do
  wait -n
  flush
done
# Every module's own status, whether or not wait -n collected it above, and
# as its log says it.
for pid in "${pids[@]}"; do
  wait "$pid" || failed=1
done
flush
if grep -q '^== .*: FAILED in [0-9]*s$' "$logs"/*.done; then
  failed=1
fi
exit $failed
