# Each target installs redis-server first if it is missing (Debian's package).
GO ?= go
TESTFLAGS ?= -race -count=1 -timeout 15m

.PHONY: test demo bench compare lint redis torture

# The test command: every package of the library, of the CLI and of the miniredis check (modules of their own), under the race
# detector, against real redis-server processes.
test: redis
	$(GO) test $(TESTFLAGS) ./...
	cd cmd/dlock && $(GO) test $(TESTFLAGS) ./...
	cd dlocktest/miniredis && $(GO) test $(TESTFLAGS) ./...

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
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	cd cmd/dlock && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

redis:
	@bash scripts/ensure-redis.sh

# The randomized fault checker with a long budget (CI runs it for ~100s as part of `make test`).
# Replay a failure with the seed and round it prints: go test -race ./internal/torture -torture.seed=S -torture.round=R
TORTURE_BUDGET ?= 30m
torture: redis
	$(GO) test -race -count=1 -timeout 40m ./internal/torture -run TestTorture -v -torture.budget=$(TORTURE_BUDGET)
