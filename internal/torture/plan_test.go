package torture

import (
	"testing"
)

// A semaphore round draws its N from SemPermits, after every other choice
// of its plan and in no other mode: a round of any other mode plans as it
// did before N was drawn (its seed replays as before, N = 1), a semaphore
// round's other choices are the ones the same seed gives other modes, and
// both sizes come up.
func TestPlanDrawsSemaphoreSizeOnlyInSemaphoreRounds(t *testing.T) {
	seen := map[int]int{}
	for seed := uint64(1); seed <= 20; seed++ {
		for round := range 10 {
			sem := newPlan(seed, round, false, ModeSemaphore)
			if sem.permits < 2 || sem.permits > SemPermits[len(SemPermits)-1] {
				t.Fatalf("seed %d round %d: semaphore round with N = %d, want one of %v", seed, round, sem.permits, SemPermits)
			}
			seen[sem.permits]++
			for _, mode := range Modes {
				if mode == ModeSemaphore {
					continue
				}
				p := newPlan(seed, round, false, mode)
				if p.permits != 1 {
					t.Fatalf("seed %d round %d: %s round with N = %d, want 1", seed, round, mode, p.permits)
				}
				if p.ttl != sem.ttl || len(p.names) != len(sem.names)+boolInt(mode == ModeMulti) || p.run != sem.run ||
					p.routines != sem.routines || p.procs != sem.procs || p.restarts != sem.restarts || p.finalKill != sem.finalKill {
					t.Fatalf("seed %d round %d: %s plan %+v and semaphore plan %+v differ in more than mode and N", seed, round, mode, p, sem)
				}
			}
		}
	}
	for _, n := range SemPermits {
		if seen[n] == 0 {
			t.Errorf("N = %d never drawn in 200 semaphore rounds: %v", n, seen)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
