package leakcheck

import "testing"

// Count counts the goroutines of the profile's first record too: the one
// with the most goroutines, which the profile's header line heads.
func TestCountSeesTheCommonestStack(t *testing.T) {
	Check(t)
	stop := make(chan struct{})
	parked := make(chan struct{}, 3)
	for range 3 {
		go park(parked, stop)
	}
	for range 3 {
		<-parked
	}
	n := Count(t, "leakcheck.park")
	close(stop)
	if n != 3 {
		t.Errorf("Count of 3 goroutines parked alike = %d, want 3", n)
	}
}

func park(parked chan<- struct{}, stop <-chan struct{}) {
	parked <- struct{}{}
	<-stop
}
