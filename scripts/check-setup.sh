#!/usr/bin/env bash
# Checks the README's set-up as a user follows it: a throwaway module outside the repository, beside a checkout
# of it at ../dlock, runs the README's set-up commands word for word and builds the README's quick start, plus
# code that imports every package a user may import (dlock, dlocktest and the five extra/ modules) —
# with no network: GOPROXY=off, so a module the set-up fails to point at the checkout cannot be fetched instead.
#
# The README marks the two blocks it takes:
#   <!-- check-setup: commands -->  before the ```sh block of set-up commands (run in the module's directory)
#   <!-- check-setup: program -->   before the ```go block of the quick start (a whole main package)
#
# First, online, `go mod tidy -diff` in the modules a user imports (the root and the extra/ modules), then the set-up once in a module of its own,
# brings into the module cache everything a user's `go mod tidy` reads, which the builds and tests of the
# repository do not all fetch (go.mod files of the whole graph, the modules of their tests' imports); it also
# fails if one of those modules is not tidy. Offline, the repository's go.sum files stand in for the checksum
# database: the throwaway module's go.sum starts as their union, and `go mod tidy` keeps what it needs.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd -P)
readme=$repo/README.md
modules=(. extra/dlockotel extra/dlockprom extra/dlockrueidis extra/dlockvalkey extra/dlockredigo)

# block MARKER prints the lines of the first fenced code block after the line "<!-- check-setup: MARKER -->".
block() {
	awk -v marker="<!-- check-setup: $1 -->" '
		$0 == marker { found = 1; next }
		found && !inside && /^```/ { inside = 1; next }
		inside && /^```/ { exit }
		inside { print }
	' "$readme"
}

commands=$(block commands)
program=$(block program)
if [[ -z $commands || -z $program ]]; then
	echo "check-setup: README.md lacks the block after <!-- check-setup: commands --> or <!-- check-setup: program -->" >&2
	exit 1
fi

echo "check-setup: warming the module cache (go mod tidy -diff in ${modules[*]})"
for m in "${modules[@]}"; do
	if ! (cd "$repo/$m" && go mod tidy -diff); then
		echo "check-setup: go mod tidy -diff failed in $m: the module is not tidy (its diff is above), or its dependencies could not be downloaded" >&2
		exit 1
	fi
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT # removes the link to the checkout, not the checkout
case $tmp/ in "$repo"/*)
	echo "check-setup: the temporary directory $tmp is inside the repository" >&2
	exit 1
	;;
esac
ln -s "$repo" "$tmp/dlock" # the checkout, at ../dlock from the module

# populate writes the program, and code that imports every package a user may import, into the current directory.
populate() {
printf '%s\n' "$program" >main.go
cat >imports.go <<'EOF'
package main

import (
	"testing"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/dlocktest"
	"github.com/dlockio/dlock/extra/dlockotel"
	"github.com/dlockio/dlock/extra/dlockprom"
	"github.com/dlockio/dlock/extra/dlockredigo"
	"github.com/dlockio/dlock/extra/dlockrueidis"
	"github.com/dlockio/dlock/extra/dlockvalkey"
)

func instrument(c *dlock.Client) error {
	if err := dlockotel.Instrument(c); err != nil {
		return err
	}
	_, err := dlockprom.NewCollector(c)
	return err
}

func testClient(t *testing.T) *dlock.Client { return dlocktest.NewClient(t) }

var _, _, _, _, _ = instrument, testClient, dlockrueidis.New, dlockvalkey.New, dlockredigo.New
EOF
}

# Online, the set-up once in a module of its own: a user's `go mod tidy` selects, across the modules it imports
# together, versions that none of their own `go mod tidy` needs (the tests of a dependency's dependencies); this
# brings them into the module cache as a user's first, online, set-up would.
echo "check-setup: warming the module cache with the set-up, online, in a module of its own"
mkdir "$tmp/warm"
if ! (cd "$tmp/warm" && populate && GOWORK=off GOTOOLCHAIN=local bash -euo pipefail -c "$commands" >/dev/null 2>&1 &&
	go build -o /dev/null .); then
	echo "check-setup: the set-up failed online; its go mod tidy says:" >&2
	(cd "$tmp/warm" && GOWORK=off go mod tidy) >&2 || true
	exit 1
fi

app=$tmp/app
mkdir "$app"
cd "$app"

export GOPROXY=off GOWORK=off GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
for m in "${modules[@]}"; do cat "$repo/$m/go.sum"; done | sort -u >go.sum
populate

echo "check-setup: in $app, beside a link ../dlock to the checkout, offline (GOPROXY=off GOFLAGS=$GOFLAGS):"
printf '%s\n' "$commands" | sed 's/^/  $ /'
bash -euo pipefail -c "$commands"
go build -o /dev/null .
go vet .
echo "check-setup: go.mod after the set-up:"
sed 's/^/  /' go.mod
echo "check-setup: ok: the README's set-up and quick start build dlock, dlocktest and the five extra/ modules offline"
