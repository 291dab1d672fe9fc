# Each target installs redis-server first if it is missing (Debian's package).
GO ?= go

.PHONY: test test-short test-fips test-valkey demo bench compare lint check-setup redis torture

# The test command: every module's tests (the library, the CLI, the miniredis check, the OpenTelemetry and Prometheus
# adapters, the rueidis, valkey-go and redigo drivers) under the race detector, against real redis-server processes.
# Modules run one after another (scripts/test-modules.sh, JOBS=1; more side by side on a machine with more cores),
# and in each, the tests that own their servers run in parallel (-parallel: they spend most of their time waiting for
# leases, not on the CPU; 4 at a time, because several start servers and processes of their own, and the timing
# tests need a share of a two-core machine).
TESTFLAGS ?= -race -count=1 -timeout 20m -parallel 4
export JOBS ?= 1
MODULES = . cmd/dlock extra/dlockrueidis extra/dlockvalkey extra/dlockredigo dlocktest/miniredis extra/dlockotel extra/dlockprom
test: redis
	bash scripts/test-modules.sh $(TESTFLAGS) -- $(MODULES)

# The quick tier, for the edit loop: the library's module with the long fault and timing scenarios skipped
# (testing.Short) and the fault checker on a 25 s budget (one round of under ten seconds: a round runs only if it
# ends within the budget).
test-short: redis
	$(GO) test -short $(TESTFLAGS) ./...

# The quick tier of the library and the CLI in FIPS 140-only mode: a use of an algorithm FIPS 140-3 does not
# approve (SHA-1: the scripts' digests are written by go generate, not computed) panics.
test-fips: redis
	GODEBUG=fips140=only bash scripts/test-modules.sh -short $(TESTFLAGS) -- . cmd/dlock

# The root package's tests, and the valkey-go driver's whole table (-full), against Valkey instead of Redis, when a
# valkey-server is found: VALKEY_SERVER, else valkey-server in PATH, else ../shared/bin/valkey-server. When there is
# none, it says so and runs the valkey-go driver's whole table against redis-server.
VALKEY_SERVER ?= $(or $(shell command -v valkey-server 2>/dev/null),$(abspath ../shared/bin/valkey-server))
test-valkey: redis
	@if [ -x "$(VALKEY_SERVER)" ]; then \
		"$(VALKEY_SERVER)" --version && \
		REDIS_SERVER="$(VALKEY_SERVER)" bash scripts/test-modules.sh $(TESTFLAGS) -- .:. "extra/dlockvalkey:./... -full"; \
	else \
		echo "test-valkey: no valkey-server at $(VALKEY_SERVER) (set VALKEY_SERVER): the valkey-go driver's whole table runs against redis-server instead"; \
		bash scripts/test-modules.sh $(TESTFLAGS) -- "extra/dlockvalkey:./... -full"; \
	fi

# The batch-dispatch demo on a private redis-server.
demo: redis
	cd cmd/dlock && $(GO) run . demo

bench: redis
	$(GO) test -run '^$$' -bench . -benchtime 2s -count 1 .

# The side-by-side comparison with other Go lock libraries (its own module).
compare: redis
	cd bench && $(GO) run . -out results

lint:
	$(GO) vet ./...
	cd cmd/dlock && $(GO) vet ./...
	cd bench && $(GO) vet ./...
	cd dlocktest/miniredis && $(GO) vet ./...
	cd extra/dlockotel && $(GO) vet ./...
	cd extra/dlockprom && $(GO) vet ./...
	cd extra/dlockrueidis && $(GO) vet ./...
	cd extra/dlockvalkey && $(GO) vet ./...
	cd extra/dlockredigo && $(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	cd cmd/dlock && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	cd extra/dlockotel && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	cd extra/dlockprom && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	cd extra/dlockrueidis && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	cd extra/dlockvalkey && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	cd extra/dlockredigo && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

# The README's set-up commands and quick start, run as written in a throwaway module outside the repository, offline
# (GOPROXY=off), importing the library, dlocktest and both extras; see scripts/check-setup.sh.
check-setup:
	bash scripts/check-setup.sh

redis:
	@bash scripts/ensure-redis.sh

# The randomized fault checker with a long budget (CI runs it for ~100s as part of `make test`).
# Replay a failure with the seed and round it prints: go test -race ./internal/torture -torture.seed=S -torture.round=R
TORTURE_BUDGET ?= 30m
torture: redis
	$(GO) test -race -count=1 -timeout 40m ./internal/torture -run TestTorture -v -torture.budget=$(TORTURE_BUDGET)
