// Package testopt gives dlock's tests, checker and benchmarks the Client
// options that the API does not offer.
package testopt

import "github.com/dlockio/dlock"

// Pipelining turns a Client's batcher on (the API's only setting) or off: a
// test that runs both checks that the fast path behaves as the slow one.
func Pipelining(on bool) dlock.Option { return pipelining{on: on} }

// pipelining is an Option that New reads through its Pipelining method; its
// Option is nil, never applied.
type pipelining struct {
	dlock.Option
	on bool
}

func (p pipelining) Pipelining() bool { return p.on }
