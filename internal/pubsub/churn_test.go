package pubsub

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

var churnSeed = flag.Uint64("churn.seed", 0, "seed of the churn test's schedule (0: from the time)")

// Waiters come and go on a few channels, and messages are published,
// while the hub's connections are cut again and again at random moments
// (a seeded schedule), or the server is restarted: after each break every
// waiter whose channel was listened to before it is woken (Recheck: a
// message may have been lost), and at the end each waiter is listened to
// and woken by a release.
func TestEveryWaiterWokenAfterEachCutUnderChurn(t *testing.T) {
	t.Parallel()
	rounds := 12
	if testing.Short() {
		rounds = 4
	}
	seed := *churnSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (-churn.seed reruns it)", seed)
	bothModes(t, func(t *testing.T, sharded bool) {
		rng := rand.New(rand.NewPCG(seed, 1))
		h, rdb, s, p := startHub(t, sharded)
		defer h.Close()
		publish := rdb.Publish
		if sharded {
			publish = rdb.SPublish
		}
		type waiter struct {
			w    *Waiter
			ch   string
			wake chan int64
		}
		var ws []waiter
		n, checked := 0, 0
		add := func() {
			n++
			ch := fmt.Sprint("ch", rng.IntN(5))
			wake := make(chan int64, 1)
			w, _ := h.Subscribe(ch, fmt.Sprint("t", n), wake)
			ws = append(ws, waiter{w, ch, wake})
		}
		listened := func() bool {
			for _, w := range ws {
				if h.Listening(w.ch) {
					return true
				}
			}
			return false
		}
		for round := range rounds {
			for range rng.IntN(30) {
				switch r := rng.IntN(10); {
				case r < 5 || len(ws) == 0:
					add()
				case r < 7:
					i := rng.IntN(len(ws))
					ws[i].w.Close()
					ws = append(ws[:i], ws[i+1:]...)
				default:
					publish(t.Context(), fmt.Sprint("ch", rng.IntN(5)), WakeAll)
				}
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
			}
			// Each cut meets at least one waiter listened to; the others
			// may still be on their way.
			if len(ws) == 0 {
				add()
			}
			for deadline := time.Now().Add(10 * time.Second); !listened(); time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("round %d: no channel listened to 10s after its waiter came", round)
				}
			}
			var heard []waiter // (a channel first confirmed after the cut wakes nobody)
			for _, w := range ws {
				select {
				case <-w.wake:
				default:
				}
				if h.Listening(w.ch) {
					heard = append(heard, w)
				}
			}
			checked += len(heard)
			if round%3 == 2 {
				s.Restart()
			} else {
				p.Cut()
			}
			for _, w := range heard {
				select {
				case <-w.wake:
				case <-time.After(10 * time.Second):
					t.Fatalf("round %d: waiter %s on %s not woken 10s after the cut", round, w.w.token, w.ch)
				}
			}
		}
		t.Logf("%d waiters listened to at the cuts", checked) // (at least one a cut: see above)
		for _, w := range ws {
			for deadline := time.Now().Add(10 * time.Second); !h.Listening(w.ch); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%s not listened to 10s after the last cut", w.ch)
				}
			}
		}
		for _, w := range ws {
			select {
			case <-w.wake:
			default:
			}
		}
		for ch := range 5 {
			publish(t.Context(), fmt.Sprint("ch", ch), WakeAll)
		}
		for _, w := range ws {
			expect(t, w.w.token+" on "+w.ch, w.wake, Released)
			w.w.Close()
		}
	})
}
