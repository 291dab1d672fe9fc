#!/usr/bin/env bash
# Runs `go test` in several of the repository's modules side by side, at most $JOBS at a time (3 by default), and
# prints each module's output whole as it ends, with how long it took, then a line per module. Fails if any of them
# failed. Needs bash 4.3 or later (wait -n).
#
# Usage: test-modules.sh GO-TEST-FLAGS... -- DIR[:ARGS]...
#   DIR is a module's directory; ARGS (default ./...) the packages and test-binary flags for it, split at spaces.
#   Give the longest first: they start in the order given.
set -uo pipefail
cd "$(dirname "$0")/.."

flags=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do flags+=("$1"); shift; done
if [ $# -lt 2 ]; then
  echo "usage: $0 GO-TEST-FLAGS... -- DIR[:ARGS]..." >&2
  exit 2
fi
shift
jobs_max=${JOBS:-3}
case "$jobs_max" in
  '' | *[!0-9]* | 0) echo "$0: JOBS=$jobs_max: want a number of at least 1" >&2; exit 2 ;;
esac
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
trap 'kill $(jobs -p) 2>/dev/null; exit 130' INT TERM

one() {
  local dir=$1 args=$2 log=$3 start=$SECONDS rc name=$1
  [ "$dir" = . ] && name="(root module)"
  # shellcheck disable=SC2086 # ARGS is a list of words
  (cd "$dir" && "${GO:-go}" test "${flags[@]}" $args) >"$log" 2>&1
  rc=$?
  # Written whole, then renamed: flush never prints half of it.
  { cat "$log"; echo "== $name: $( [ $rc -eq 0 ] && echo ok || echo FAILED ) in $((SECONDS - start))s"; } >"$log.tmp"
  mv "$log.tmp" "$log.done"
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
echo "== every module:"
grep -h '^== .*: [A-Za-z]* in [0-9]*s$' "$logs"/*.done
if grep -q '^== .*: FAILED in [0-9]*s$' "$logs"/*.done; then
  failed=1
fi
exit $failed
