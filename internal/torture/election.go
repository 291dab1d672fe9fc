package torture

import "sort"

// checkLeaderReads is (h), for an election round: a read of the leader
// (Election.Leader) that names a leader names it with its own term's fence
// (the one its Campaign got) and a value of that term (see leaderValue),
// and terms rise in real time: a read sent
// after another read, or a campaign, returned never names an earlier term
// than that one saw. Reads within an exempt window are not checked.
//
// One token may have been handed the leadership before the term its
// Campaign returned with: a candidate paused while the leadership was
// handed to it loses that lease without ever acting on it, queues again
// with the same token and is handed a later term. A read of that earlier
// term has a lower fence and was sent before the Campaign returned.
func checkLeaderReads(h []Event, ex exempt, r *Report) {
	terms := map[string]Event{} // the leaderships granted, by token
	for _, e := range acquisitions(h) {
		if e.Fence > 0 {
			terms[e.Tok] = e
		}
	}
	for _, e := range h { // a resumed leadership is issued a fence above its term's
		if t, ok := terms[e.Tok]; ok && e.Op == OpResume && e.Res == "ok" && e.Fence > t.Fence {
			terms[e.Tok] = e
		}
	}
	var reads []Event
	for _, e := range h {
		if e.Op == OpLeader && e.Res == "ok" && e.Tok != "" && !ex.covers(e.Inv, e.Ret) {
			reads = append(reads, e)
		}
	}
	proclaimed := map[string]Event{} // by value (each is unique), and by token the last one that returned
	latest := map[string]Event{}
	for _, e := range h {
		if e.Op == OpProclaim {
			proclaimed[e.Seen] = e
			if e.Res == "ok" && e.Ret > latest[e.Tok].Ret {
				latest[e.Tok] = e
			}
		}
	}
	for _, e := range reads {
		r.Checked["h"]++
		if t, ok := terms[e.Tok]; ok && (e.Fence > t.Fence || (e.Fence < t.Fence && e.Inv > t.Ret)) {
			r.failCS("h", e.Name, e.Ret, []string{t.CS}, "%s read leader %s with fence %d at %s; its campaign got fence %d",
				e.W, t.CS, e.Fence, ms(e.Ret), t.Fence)
		}
		leaderValue(e, terms[e.Tok], proclaimed, latest[e.Tok], r)
	}
	byRet := append([]Event(nil), reads...)
	for _, t := range terms {
		if !ex.covers(t.Inv, t.Ret) {
			byRet = append(byRet, t)
		}
	}
	sort.SliceStable(byRet, func(i, j int) bool { return byRet[i].Ret < byRet[j].Ret })
	type top struct {
		fence int64
		e     Event
	}
	high := map[string]top{} // per name, the highest term seen by a read or campaign that returned already
	k := 0
	for _, e := range reads { // in order of invocation (h is sorted by Inv)
		for ; k < len(byRet) && byRet[k].Ret < e.Inv; k++ {
			if t := high[byRet[k].Name]; byRet[k].Fence > t.fence {
				high[byRet[k].Name] = top{byRet[k].Fence, byRet[k]}
			}
		}
		if t := high[e.Name]; e.Fence < t.fence {
			r.fail("h", e.Name, e.Inv, "%s read fence %d at %s, after %s (%s) had seen fence %d at %s",
				e.W, e.Fence, ms(e.Ret), t.e.W, t.e.Op, t.fence, ms(t.e.Ret))
		}
	}
}

// leaderValue checks the value a read e of the leader showed: one the term
// named proclaimed (Leadership.Proclaim) before the read returned, or its
// campaign's (its worker's id) unless a Proclaim of the term had returned
// before the read was sent (last). term is the term's campaign, if known.
func leaderValue(e, term Event, proclaimed map[string]Event, last Event, r *Report) {
	p, ok := proclaimed[e.Seen]
	switch {
	case ok && p.Tok != e.Tok:
		r.failCS("h", e.Name, e.Ret, []string{p.CS}, "%s read leader %s showing %q, proclaimed by another term (%s)",
			e.W, e.Tok, e.Seen, p.CS)
	case ok && p.Inv > e.Ret:
		r.failCS("h", e.Name, e.Ret, []string{p.CS}, "%s read %q at %s, before %s proclaimed it at %s",
			e.W, e.Seen, ms(e.Ret), p.CS, ms(p.Inv))
	case !ok && last.Op != "" && last.Ret < e.Inv:
		r.failCS("h", e.Name, e.Ret, []string{last.CS}, "%s read leader %s showing %q at %s, after it proclaimed %q (returned %s)",
			e.W, e.Tok, e.Seen, ms(e.Ret), last.Seen, ms(last.Ret))
	case !ok && term.Op != "" && e.Seen != term.W:
		r.failCS("h", e.Name, e.Ret, []string{term.CS}, "%s read leader %s showing %q, neither its campaign's value (%q) nor one it proclaimed",
			e.W, e.Tok, e.Seen, term.W)
	}
}
