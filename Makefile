# Each target installs redis-server first if it is missing (Debian's package).
GO ?= go
TESTFLAGS ?= -race -count=1 -timeout 15m

.PHONY: test test-short test-valkey demo bench compare lint check-setup redis torture

# The test command: every package of the library, of the CLI, of the miniredis check, of the OpenTelemetry and
# Prometheus adapters and of the rueidis and valkey-go drivers (modules of their own), under the race detector,
# against real redis-server processes.
test: redis
	$(GO) test $(TESTFLAGS) ./...
	cd cmd/dlock && $(GO) test $(TESTFLAGS) ./...
	cd dlocktest/miniredis && $(GO) test $(TESTFLAGS) ./...
	cd extra/dlockotel && $(GO) test $(TESTFLAGS) ./...
	cd extra/dlockprom && $(GO) test $(TESTFLAGS) ./...
	cd extra/dlockrueidis && $(GO) test $(TESTFLAGS) ./...
	cd extra/dlockvalkey && $(GO) test $(TESTFLAGS) ./...

# The quick check before a commit (two to four minutes on two cores): the library's module under the race detector,
# with the long fault and timing scenarios skipped (testing.Short) and one round of the fault checker. `make test`
# runs everything.
test-short: redis
	$(GO) test -short -race -count=1 -timeout 10m ./...

# The root package's tests, and the valkey-go driver's, against Valkey instead of Redis, when a valkey-server is found: VALKEY_SERVER,
# else valkey-server in PATH, else ../shared/bin/valkey-server. Skipped, with a message, when there is none.
VALKEY_SERVER ?= $(or $(shell command -v valkey-server 2>/dev/null),$(abspath ../shared/bin/valkey-server))
test-valkey: redis
	@if [ -x "$(VALKEY_SERVER)" ]; then \
		"$(VALKEY_SERVER)" --version && \
		REDIS_SERVER="$(VALKEY_SERVER)" $(GO) test $(TESTFLAGS) . && \
		cd extra/dlockvalkey && REDIS_SERVER="$(VALKEY_SERVER)" $(GO) test $(TESTFLAGS) . ; \
	else \
		echo "test-valkey: no valkey-server at $(VALKEY_SERVER) (set VALKEY_SERVER): skipped"; \
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
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	cd cmd/dlock && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	cd extra/dlockotel && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	cd extra/dlockprom && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	cd extra/dlockrueidis && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	cd extra/dlockvalkey && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

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
