package main

import (
	"fmt"
	"math"
	"os"
	"strings"
	"time"
)

type report struct {
	env     string
	w0      []w0Result
	w0depth []w0Result // W0's (c) cases at the depths of -w0depths
	w1      []w1Result
	// leftovers: what each library leaves in Redis per lock name (W1's loop)
	leftovers []leftover
	w2        []w2Result
	// tripCeiling: a 1ms-hold loop with one round trip to Redis per
	// iteration, relative to the same loop without it (oneTripCeiling).
	tripCeiling float64
	w3          []w3Result
	w4          []w4Result
}

func (r *report) write(out string) error {
	if err := os.WriteFile(out+".md", []byte(r.markdown()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(out+".svg", []byte(r.svg()), 0o644)
}

func ms(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.0fms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	}
}

func isDlock(lib string) bool { return strings.HasPrefix(lib, "dlock") }

func (r *report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Machine: %s.\n\n", r.env)
	r.w0Markdown(&b)
	r.w0DepthMarkdown(&b)
	r.w1Markdown(&b)
	r.leftoversMarkdown(&b)
	r.w2Markdown(&b)
	r.w3Markdown(&b)
	r.w4Markdown(&b)
	return b.String()
}

// baseline is W0(b)'s Redis CPU per pair: SET NX PX and a Lua
// compare-and-delete, the least a safe lock pair costs the server.
func (r *report) baseline() time.Duration {
	for _, x := range r.w0 {
		if x.id == "b" {
			return x.serverCPU
		}
	}
	return 0
}

func µs(d time.Duration) string { return fmt.Sprintf("%.2fµs", float64(d)/1e3) }

func (r *report) w0Markdown(b *strings.Builder) {
	if len(r.w0) == 0 {
		return
	}
	fmt.Fprintf(b, "**W0 — the server's ceiling**: what one redis-server does per lock pair with no client library in the way: "+
		"the commands of a lock+unlock pair as raw RESP, %d pairs (%d commands) pipelined on each of %d connections, "+
		"each pipelined slot on a name of its own (the same every round, as a W1 goroutine keeps its name) and each pair with a fresh token. At that depth Redis's CPU per pair is what the commands "+
		"themselves cost; \"pairs/s per Redis core\" is the rate one fully busy Redis thread would reach at that cost "+
		"(on a machine with few cores the client takes part of the CPU, and pairs/s is lower).\n\n",
		w0Pairs, 2*w0Pairs, w0Conns)
	b.WriteString("| commands per pair | pairs/s | Redis CPU/pair | pairs/s per Redis core | Redis CPU vs (b) | client CPU/pair |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|\n")
	base := r.baseline()
	for _, x := range r.w0 {
		ratio, perCore := "—", "—"
		if base > 0 {
			ratio = fmt.Sprintf("%.2f×", float64(x.serverCPU)/float64(base))
		}
		if x.serverCPU > 0 {
			perCore = fmt.Sprintf("%.0f", float64(time.Second)/float64(x.serverCPU))
		}
		fmt.Fprintf(b, "| %s | %.0f | %s | %s | %s | %s |\n", x.name, x.rate, µs(x.serverCPU), perCore, ratio, µs(x.clientCPU))
	}
	b.WriteString("\n")
}

func (r *report) w1Markdown(b *strings.Builder) {
	if len(r.w1) == 0 {
		return
	}
	b.WriteString("**W1 — uncontended** (C goroutines, one name each, lock+unlock pairs; Redis CPU = redis-server's CPU time per pair; " +
		"vs W0(b) = that CPU over W0(b)'s, the pipelined SET NX PX + Lua compare-and-delete; batch = dlock's script calls per pipeline, from Client.Stats)\n\n")
	b.WriteString("| C | library | pairs/s | vs best other | p50 | p99 | allocs/pair | Redis CPU/pair | Redis CPU vs W0(b) | batch |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	best := map[int]float64{}
	for _, x := range r.w1 {
		if !isDlock(x.lib) {
			best[x.c] = math.Max(best[x.c], x.rate)
		}
	}
	base := r.baseline()
	for _, x := range r.w1 {
		ratio, vsW0 := "—", "—"
		if isDlock(x.lib) && best[x.c] > 0 {
			ratio = fmt.Sprintf("%.2f×", x.rate/best[x.c])
		}
		if base > 0 {
			vsW0 = fmt.Sprintf("%.1f×", float64(x.serverCPU)/float64(base))
		}
		batch := "—"
		if x.batch > 0 {
			batch = fmt.Sprintf("%.1f", x.batch)
		}
		fmt.Fprintf(b, "| %d | %s | %.0f | %s | %s | %s | %.1f | %.1fµs | %s | %s |\n",
			x.c, x.lib, x.rate, ratio, ms(x.p50), ms(x.p99), x.allocs, float64(x.serverCPU)/1e3, vsW0, batch)
	}
	b.WriteString("\n")
}

func (r *report) leftoversMarkdown(b *strings.Builder) {
	if len(r.leftovers) == 0 {
		return
	}
	fmt.Fprintf(b, "**W1 — what stays in Redis** (W1's loop with %d goroutines, each pair on a name of its own, lease %v; "+
		"keys and INFO memory used_memory after minus before, per name, right after every lock was released and again "+
		"once the lease — dlock's revocation window, min(TTL, 1 min) — has passed: what is left then stays for good. A name per pair, "+
		"so that what a library leaves per lease and what it leaves per name both show per name)\n\n", leftoverC, leftoverTTL)
	b.WriteString("| library | names | keys/name after release | bytes/name | keys/name after the window | bytes/name |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|\n")
	for _, x := range r.leftovers {
		// +0 turns a rounding "-0" (noise around nothing left) into "0".
		fmt.Fprintf(b, "| %s | %d | %.2f | %.0f | %.2f | %.0f |\n", x.lib, x.names, x.keysAfter, math.Round(x.bytesAfter)+0, x.keysKept, math.Round(x.bytesKept)+0)
	}
	b.WriteString("\n")
}

func (r *report) w2Markdown(b *strings.Builder) {
	if len(r.w2) == 0 {
		return
	}
	b.WriteString("**W2 — contended** (C goroutines on one name, each holding it `hold`; FIFO ideal p99 = C × hold)\n\n")
	b.WriteString("| C | hold | library | acq/s | vs no-Redis loop | wait p50 | p99 | max | p99 / FIFO ideal | fewest/most | cmds/acq | violations |\n")
	b.WriteString("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.w2 {
		ideal := "—"
		if x.hold > 0 {
			ideal = fmt.Sprintf("%.1f×", float64(x.p99)/float64(time.Duration(x.c)*x.hold))
		}
		fmt.Fprintf(b, "| %d | %v | %s | %.0f | %.0f%% | %s | %s | %s | %s | %.2f | %.1f | %d |\n",
			x.c, x.hold, x.lib, x.rate, 100*x.rate/x.baseline, ms(x.p50), ms(x.p99), ms(x.max), ideal, x.fairness, x.cmds, x.violations)
	}
	b.WriteString("\n")
	if r.tripCeiling > 0 {
		fmt.Fprintf(b, "Ceiling for a handover that crosses Redis once: a loop that sleeps 1ms and then makes one round trip "+
			"(PING) runs at **%.0f%%** of the same loop without it, on this machine.\n\n", 100*r.tripCeiling)
	}
}

func (r *report) w3Markdown(b *strings.Builder) {
	if len(r.w3) == 0 {
		return
	}
	b.WriteString("**W3 — quorum of 5 independent nodes** (one goroutine, lock+unlock on fresh names; the first row of each library is one of the nodes alone, and \"vs one node\" the acquire p50 over that row's)\n\n")
	b.WriteString("| library | nodes | pairs | acquire p50 | vs one node | p99 | release p50 | p99 |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
	base := map[string]time.Duration{}
	for _, x := range r.w3 {
		if _, ok := base[x.lib]; !ok {
			base[x.lib] = x.acqP50 // quorumRuns measures one node first
		}
		ratio := "—"
		if b0 := base[x.lib]; b0 > 0 {
			ratio = fmt.Sprintf("%.2f×", float64(x.acqP50)/float64(b0))
		}
		fmt.Fprintf(b, "| %s | %s | %d | %s | %s | %s | %s | %s |\n", x.lib, x.scenario, x.n, ms(x.acqP50), ratio, ms(x.acqP99), ms(x.relP50), ms(x.relP99))
	}
	b.WriteString("\n")
}

var palette = []string{"#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#ff7f0e", "#8c564b"}

// color gives each library the same color in every panel.
func color(lib string) string {
	for i, l := range libraries {
		if l.name == lib {
			return palette[i%len(palette)]
		}
	}
	return "#333"
}

// svg draws W1 throughput at the largest C as bars, and the W2 wait-time
// distribution at the largest C with a 1ms hold as CDF lines.
func (r *report) svg() string {
	const w, h = 1000, 440
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)

	// Left: W1 bars.
	var bars []w1Result
	maxC := 0
	for _, x := range r.w1 {
		maxC = max(maxC, x.c)
	}
	top := 1.0
	for _, x := range r.w1 {
		if x.c == maxC {
			bars = append(bars, x)
			top = math.Max(top, x.rate)
		}
	}
	fmt.Fprintf(&b, `<text x="20" y="24" font-size="14">W1 uncontended, C=%d: lock+unlock pairs/s</text>`+"\n", maxC)
	for i, x := range bars {
		y := 50 + i*50
		bw := 300 * x.rate / top
		fmt.Fprintf(&b, `<text x="20" y="%d">%s</text>`+"\n", y+20, x.lib)
		fmt.Fprintf(&b, `<rect x="130" y="%d" width="%.0f" height="30" fill="%s"/>`+"\n", y, bw, color(x.lib))
		fmt.Fprintf(&b, `<text x="%.0f" y="%d">%.0f</text>`+"\n", 135+bw, y+20, x.rate)
	}

	// Right: W2 CDF, log-scaled wait.
	var lines []w2Result
	for _, x := range r.w2 {
		if x.hold == time.Millisecond && x.c == 32 {
			lines = append(lines, x)
		}
	}
	const x0, x1, y0, y1 = 580.0, 980.0, 360.0, 50.0
	lo, hi := math.Log10(1e-4), math.Log10(10.0) // 0.1ms .. 10s
	px := func(d time.Duration) float64 {
		s := math.Max(d.Seconds(), 1e-4)
		return x0 + (x1-x0)*(math.Log10(s)-lo)/(hi-lo)
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="24" font-size="14">W2 contended, C=32, hold 1 ms: share of waits ≤ t</text>`+"\n", x0-40)
	for _, q := range []float64{0, 0.5, 1} {
		y := y0 - (y0-y1)*q
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">%.1f</text>`+"\n", x0-6, y+4, q)
	}
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n", x0, y0, x1, y0)
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n", x0, y0, x0, y1)
	for _, tick := range []time.Duration{time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond, time.Second, 10 * time.Second} {
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle">%s</text>`+"\n", px(tick), y0+16, ms(tick))
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#ddd"/>`+"\n", px(tick), y0, px(tick), y1)
	}
	ideal := px(32 * time.Millisecond)
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#999" stroke-dasharray="4"/><text x="%.0f" y="%.0f" fill="#999" text-anchor="end">FIFO ideal →</text>`+"\n", ideal, y0, ideal, y1, ideal-3, y1-4)
	for i, x := range lines {
		if len(x.waits) == 0 {
			continue
		}
		var pts []string
		step := max(1, len(x.waits)/200)
		for j := 0; j < len(x.waits); j += step {
			frac := float64(j+1) / float64(len(x.waits))
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(x.waits[j]), y0-(y0-y1)*frac))
		}
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(x.waits[len(x.waits)-1]), y1))
		c := color(x.lib)
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", c, strings.Join(pts, " "))
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="%s">■ %s</text>`+"\n", x0-40+float64(i%3)*140, y0+40+float64(i/3)*18, c, x.lib)
	}
	b.WriteString("</svg>\n")
	return b.String()
}
