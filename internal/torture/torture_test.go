package torture

import (
	"context"
	"flag"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

var (
	flagSeed   = flag.Uint64("torture.seed", 0, "seed of the operation sequences and fault schedules (0: from the time)")
	flagBudget = flag.Duration("torture.budget", 0, "how long to run rounds (default 100s, 25s with -short)")
	flagRound  = flag.Int("torture.round", -1, "run only this round of the seed (printed with every failure)")
	flagMode   = flag.String("torture.mode", "", "run every round in this mode: "+strings.Join(Modes, ", "))
	flagOut    = flag.String("torture.out", "", "directory to save the merged history of each failing round in")
)

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{}) // faults make go-redis log dial and read failures by design
	if path := os.Getenv(WorkerEnv); path != "" {
		os.Exit(RunProcess(path))
	}
	os.Exit(m.Run())
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// TestTorture runs seeded rounds of random operations and faults against
// real redis-server processes and checks the invariants of doc.go over each
// round's history. A failure names the seed and round that reproduce it.
func TestTorture(t *testing.T) {
	if *flagMode != "" && !slices.Contains(Modes, *flagMode) {
		t.Fatalf("unknown -torture.mode %q", *flagMode)
	}
	Run(t, Options{Seed: *flagSeed, Budget: *flagBudget, Round: *flagRound, Mode: *flagMode, Out: *flagOut,
		Rerun: "go test -race ./internal/torture -run TestTorture"})
}
