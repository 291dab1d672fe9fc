package dlock

import "github.com/dlockio/dlock/internal/backend"

// Owner is one owner of a reentrant lock.
type Owner struct {
	ID    string   // the Client's instance ID and the owner, "<client>/<owner>"
	Holds int64    // the owner's live holds (each a lease of its own)
	Meta  []string // the distinct holder metadata of those holds that have one, sorted
}

// A reentrant lock shows in Info as its one owner, the one its Extra
// names, whose holds are the lock's leases.
var _ = part(func(info *Info, st backend.State) {
	if o, _ := told("", st.Extra); o != "" {
		info.Owners = []Owner{{ID: o, Holds: int64(len(st.Leases)), Meta: metasOf(st.Leases, nil)}}
	}
})
