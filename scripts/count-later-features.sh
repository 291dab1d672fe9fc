#!/usr/bin/env bash
# Counts the library lines (as count-lines.sh counts them) that belong to the features added after the line aim
# in docs/design.md was set at 8d7bdf0 (6,153 lines then): lock-delay, jeopardy, loss watch, fence checks, clock
# health, durable grants, held counts, release requests and deadlock detection. A file that is one of them counts
# whole; elsewhere a line counts if `git blame` finds it unchanged since one of their commits (so this is a floor:
# a line of theirs that a later change touched counts as the engine's). It also prints what they added when they
# landed (each merge's own change, a ceiling).
set -euo pipefail
cd "$(dirname "$0")/.."
merges="6ecd35a b2005b6 c4376b6 14080c0 a46b1dd 2ec0d16 faed63c ee89782" # their branches, merged
commits="0dcea49 9d4d770 5934699 aec6999 757fa51 514f759"                # made on main
whole="./deadlock.go ./clock.go ./fencecheck.go ./request.go internal/backend/clock.go internal/backend/durable.go internal/backend/fencecheck.go internal/backend/records.go"
theirs=$(mktemp)
trap 'rm -f "$theirs"' EXIT
{ for m in $merges; do git rev-list "$m^1..$m^2"; done; for c in $commits; do git rev-parse "$c"; done; } >"$theirs"
code() { grep -v '^[[:space:]]*$' | grep -cv '^[[:space:]]*//' || true; }
countAt() { # library lines at commit $1
	local total=0 f body
	for f in $(git ls-tree -r --name-only "$1" | grep -E '^[^/]+\.go$|^driver/[^/]+\.go$|^internal/(backend|goredisdriver|pubsub|script)/[^/]+\.go$' | grep -v '_test\.go$'); do
		body=$(git show "$1:$f")
		grep -q -e '^// Code generated' -e '^//go:build ignore' <<<"$body" && continue
		total=$((total + $(code <<<"$body")))
	done
	echo "$total"
}
files=0 blamed=0 landed=0
for f in $(ls ./*.go driver/*.go internal/{backend,goredisdriver,pubsub,script}/*.go | grep -v '_test\.go$'); do
	grep -q -e '^// Code generated' -e '^//go:build ignore' "$f" && continue
	if [[ " $whole " == *" $f "* ]]; then
		files=$((files + $(code <"$f")))
		continue
	fi
	n=$(git blame -w -C -C --line-porcelain HEAD -- "$f" | awk -v F="$theirs" '
		BEGIN { while ((getline l < F) > 0) ours[l] = 1 }
		/^[0-9a-f]+ [0-9]+ [0-9]+/ { c = $1 }
		/^\t/ { s = substr($0, 2); if (s ~ /^[ \t]*$/ || s ~ /^[ \t]*\/\//) next; if (c in ours) n++ }
		END { print n + 0 }')
	blamed=$((blamed + n))
done
for c in $merges $commits; do
	landed=$((landed + $(countAt "$c") - $(countAt "$c^1")))
done
echo "their own files $files, their lines elsewhere $blamed: $((files + blamed)) (when they landed: $landed)"
