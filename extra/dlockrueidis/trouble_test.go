package dlockrueidis

import (
	"context"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/redis/rueidis"

	"github.com/dlockio/dlock/internal/redistest"
)

// unhashable is a rueidis.Client whose type is comparable but whose value,
// holding a slice, cannot key a map.
type unhashable struct{ rueidis.Client }

type withSlice struct {
	rueidis.Client
	_ []string
}

// A client that cannot key the trouble record is not refused and does not
// panic when its commands fail.
func TestUnhashableClientNeitherRefusedNorPanics(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.TCP())
	conn := Conn(unhashable{withSlice{Client: client(t, s.Addr())}})
	ctx := ctxT(t, 5*time.Second)
	done, stop := context.WithCancel(ctx)
	stop()
	for i, c := range []context.Context{ctx, done, ctx} { // the second fails without a reply
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("Do %d panicked: %v", i, r)
				}
			}()
			if _, err := conn.Do(c, "PING"); (err == nil) != (c == ctx) {
				t.Fatalf("Do %d: %v", i, err)
			}
		}()
	}
}

// Once all trouble is over, the record keeps no client, so a closed one
// can be collected.
func TestTroubleRecordKeepsNoClosedClient(t *testing.T) {
	if Alone(t) { // the record is global, and other tests' failures keep it
		return
	}
	s := redistest.Start(t, redistest.TCP())
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	p := &struct{ rueidis.Client }{rc}
	wp := weak.Make(p)
	done, stop := context.WithCancel(context.Background())
	stop()
	Conn(p).Do(done, "PING") // fails without a reply: trouble
	if !inTrouble(p) {
		t.Fatal("no trouble after a failure")
	}
	rc.Close()
	p, rc = nil, nil
	// The record's sweep lets go of it troubleFor after the failure.
	limit := troubleFor + 5*time.Second
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		runtime.GC()
		if wp.Value() == nil {
			return
		}
	}
	t.Errorf("a closed client is still reachable %v after its failure", limit)
}
