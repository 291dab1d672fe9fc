package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// Keys under the prefix that dlock did not write — a list, a hash without
// a reentrant lock's owner, a sorted set without expiry — show in list and
// inspect as foreign (JSON "foreign": true), not as held locks; a lock, a
// reentrant lock and a semaphore do not.
func TestListTellsForeignKeys(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := s.Client(t)
	ctx := t.Context()
	rdb.RPush(ctx, "dlock:{f:list}", "x")
	rdb.HSet(ctx, "dlock:{f:hash}", "field", "v")
	rdb.ZAdd(ctx, "dlock:{f:zset}", redis.Z{Score: 1, Member: "member"})
	rdb.Set(ctx, "dlock:{f:lock}", "tok", time.Minute)
	rdb.HSet(ctx, "dlock:{f:re}", "owner", "client/flow", "fence", 7, "h:one", 1<<50)
	rdb.PExpire(ctx, "dlock:{f:re}", time.Minute)
	permit, err := semaphore(t, rdb, "f:sem", 2).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer permit.Release(ctx)
	wantForeign := map[string]bool{"f:list": true, "f:hash": true, "f:zset": true, "f:lock": false, "f:re": false, "f:sem": false}

	var stdout, stderr bytes.Buffer
	if code := run(ctx, []string{"list", "--redis", s.URL(), "--json", "f:*"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("list --json: exit %d, stderr %q", code, stderr.String())
	}
	got := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var in infoJSON
		if err := json.Unmarshal([]byte(line), &in); err != nil {
			t.Fatalf("list --json line %q: %v", line, err)
		}
		got[in.Name] = in.Foreign
	}
	if len(got) != len(wantForeign) {
		t.Errorf("list --json names %v, want %v", got, wantForeign)
	}
	for name, want := range wantForeign {
		if got[name] != want {
			t.Errorf("list --json: %s foreign = %v, want %v", name, got[name], want)
		}
	}

	stdout.Reset()
	if code := run(ctx, []string{"list", "--redis", s.URL(), "f:*"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("list: exit %d, stderr %q", code, stderr.String())
	}
	for _, line := range strings.Split(stdout.String(), "\n")[1:] {
		if line == "" {
			continue
		}
		name := strings.Fields(line)[0]
		if isForeign := strings.Contains(line, " foreign ") && strings.Contains(line, "not a dlock lock"); isForeign != wantForeign[name] {
			t.Errorf("list row %q: foreign %v, want %v", line, isForeign, wantForeign[name])
		}
	}
	stdout.Reset()
	if code := run(ctx, []string{"inspect", "--redis", s.URL(), "f:list"}, &stdout, &stderr); code != exitOK || !strings.Contains(stdout.String(), "not a dlock lock: a list") {
		t.Errorf("inspect of a list: exit %d, %q; want it shown as not a dlock lock", code, stdout.String())
	}
}

// dlock inspect shows each semaphore permit's holder metadata: in the
// META column (their distinct values) and per permit in JSON.
func TestInspectShowsPermitMeta(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := s.Client(t)
	ctx := t.Context()
	for _, meta := range []string{"worker 2", "worker-1"} {
		l, err := semaphore(t, rdb, "pool", 3, dlock.HolderMeta(meta)).TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
	}
	var stdout, stderr bytes.Buffer
	if code := run(ctx, []string{"inspect", "--redis", s.URL(), "pool"}, &stdout, &stderr); code != exitOK ||
		!strings.Contains(stdout.String(), `"worker 2, worker-1"`) || !strings.Contains(stdout.String(), "2 permits: ") {
		t.Errorf("inspect of a semaphore: exit %d, %q (stderr %q); want both permits' metadata in META", code, stdout.String(), stderr.String())
	}
	stdout.Reset()
	if code := run(ctx, []string{"inspect", "--redis", s.URL(), "--json", "pool"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("inspect --json: exit %d, stderr %q", code, stderr.String())
	}
	var in infoJSON
	if err := json.Unmarshal(stdout.Bytes(), &in); err != nil || len(in.Permits) != 2 {
		t.Fatalf("inspect --json = %q, %v; want 2 permits", stdout.String(), err)
	}
	metas := map[string]bool{}
	for _, p := range in.Permits {
		metas[p.Meta] = true
	}
	if !metas["worker 2"] || !metas["worker-1"] || in.Meta != "worker 2, worker-1" {
		t.Errorf("inspect --json = %+v; want each permit's metadata, and both in meta", in)
	}
}

// dlock inspect counts a hold of several permits at once
// (Semaphore.AcquireN) as that many: not "1 permit" in the table, and with
// its count and metadata in JSON.
func TestInspectCountsPermitsOfOneHold(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := s.Client(t)
	ctx := t.Context()
	three, err := semaphore(t, rdb, "pool:k", 4).AcquireN(ctx, 3, dlock.HolderMeta("job #7 x"))
	if err != nil {
		t.Fatal(err)
	}
	defer three.Release(ctx)

	var stdout, stderr bytes.Buffer
	if code := run(ctx, []string{"inspect", "--redis", s.URL(), "pool:k"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("inspect: exit %d, stderr %q", code, stderr.String())
	}
	out := stdout.String()
	if strings.Contains(out, "1 permit:") {
		t.Errorf("inspect shows a hold of 3 permits as one permit:\n%s", out)
	}
	stdout.Reset()
	if code := run(ctx, []string{"inspect", "--redis", s.URL(), "--json", "pool:k"}, &stdout, &stderr); code != exitOK {
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
