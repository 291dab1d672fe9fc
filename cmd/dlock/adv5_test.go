package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// Adversary 5: `dlock inspect` on a semaphore with a hold of 3 permits at
// once (Semaphore.AcquireN) must not report it as one permit: the table
// says "1 permit: <token>" and the JSON has no count, so an operator reads
// 1 of 4 held while 3 are.
func TestAdv5InspectCountsKHold(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := s.Client(t)
	ctx := t.Context()
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	sem, err := c.Semaphore("adv5:sem", 4)
	if err != nil {
		t.Fatal(err)
	}
	three, err := sem.AcquireN(ctx, 3, dlock.HolderMeta("job #7 x"))
	if err != nil {
		t.Fatal(err)
	}
	defer three.Release(ctx)

	var stdout, stderr bytes.Buffer
	if code := run(ctx, []string{"inspect", "--redis", s.URL(), "adv5:sem"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("inspect: exit %d, stderr %q", code, stderr.String())
	}
	out := stdout.String()
	if strings.Contains(out, "1 permit:") {
		t.Errorf("inspect shows a hold of 3 permits as one permit:\n%s", out)
	}
	stdout.Reset()
	if code := run(ctx, []string{"inspect", "--redis", s.URL(), "--json", "adv5:sem"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("inspect --json: exit %d, stderr %q", code, stderr.String())
	}
	var raw map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	ps, _ := raw["permits"].([]any)
	if len(ps) != 1 {
		t.Fatalf("permits = %v", raw["permits"])
	}
	p, _ := ps[0].(map[string]any)
	if p["meta"] != "job #7 x" {
		t.Errorf("meta = %v, want %q", p["meta"], "job #7 x")
	}
	n := 0
	for _, k := range []string{"count", "permits", "n"} {
		if v, ok := p[k].(float64); ok {
			n = int(v)
		}
	}
	if n != 3 {
		t.Errorf("inspect --json shows the hold of 3 permits without its count: %s", strings.TrimSpace(stdout.String()))
	}
}
