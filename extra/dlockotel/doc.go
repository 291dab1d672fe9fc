// Package dlockotel reports a dlock Client's operations to OpenTelemetry:
// a span per operation and metrics of waits, holds and losses.
//
//	c, err := dlock.New(rdb)
//	…
//	if err := dlockotel.Instrument(c); err != nil { // the global providers
//		return err
//	}
//
// It is a module of its own, so that the library's module keeps go-redis
// as its only dependency. It is built on [dlock.Observer]: Instrument adds
// one to the Client (and to the Clients made from it by Owner), and may be
// called while the Client is in use; operations that already started are
// not reported.
//
// # Spans
//
// Each Acquire, TryAcquire, Release and Extend (those Do makes and the
// watchdog's extensions included) is a span of kind internal named
// dlock.acquire, dlock.release or dlock.extend, started with the caller's
// context. The context of the operation's Redis calls carries the span, so
// a tracing hook on the go-redis client (redisotel.InstrumentTracing)
// makes the Redis commands its children. With pipelining (the default),
// calls that share a pipeline are sent with the context of the first one
// among them: the pipeline's span is then a child of that operation's span
// only, and the other operations in it show no Redis span of their own.
// Under low load a pipeline carries one call and each operation has its
// own.
//
// Attributes: dlock.mode (Event.Mode: fair, unfair, reentrant, quorum,
// semaphore, election, read or write), dlock.try on
// acquisitions (TryAcquire), dlock.auto on extensions (made by the
// watchdog), all set when the span starts so that a sampler can see them,
// and dlock.outcome when it ends. An Acquire that waits gets the events
// dlock.wait.begin and dlock.wait.end.
//
// The watchdog extends each held lock every TTL/3 with a background
// context: each extension is a root span of its own (dlock.auto=true),
// with its Redis calls as children. A sampler can drop them by that
// attribute.
//
// The outcome tells apart what the caller meets in normal work from
// failures: a lock found taken, or an Acquire whose context ended while it
// waited, is not_acquired, with the span's status unset; an error from
// Redis or a bad argument is error, and a lease found lost (Release or
// Extend returning an error that wraps dlock.ErrNotHeld) is lost, both with
// the status Error and the error recorded. Success is acquired, released
// or extended.
//
// A lease lost while it was held (dlock.Observer.Lost) is counted and its
// hold time recorded, but makes no span: the loss is found by a timer, and
// no operation of the caller is under way. dlock.SlogObserver logs it as an
// error.
//
// # Metrics
//
// In the meter named after this package, in seconds where they measure
// time:
//
//	dlock.acquire.duration   histogram (s)   the time an acquisition took, its wait included;
//	                                         dlock.outcome acquired, not_acquired or error
//	dlock.hold.duration      histogram (s)   how long a lease was held: at its release
//	                                         (dlock.outcome released) or its loss (lost); a
//	                                         Release that finds the lease gone records none
//	dlock.lease.lost         counter         leases lost before their release
//	dlock.extend.failures    counter         extensions that failed: dlock.outcome lost or error
//	                                         (one that crossed a Release is not counted)
//	dlock.waiters            up-down counter Acquire calls waiting now for a lock that is taken
//	dlock.held               gauge           leases held now (Client.Held), from their acquisition
//	                                         to their release or loss
//	dlock.redis.calls        counter         script calls sent through the pipelining batcher
//	dlock.redis.writes       counter         the pipelines (or lone calls) that carried them
//
// All carry dlock.mode, except the Redis calls and writes, which are read from
// Client.Stats (counts since the Client was made; 0 with
// WithoutScripts()). The histograms' bucket boundaries run from a
// millisecond to a minute for waits and to an hour for holds; a View of
// the MeterProvider can change them.
//
// # The lock name
//
// No span or metric carries the lock's name unless WithLockNameAttribute(true)
// is given: lock names are often built from identifiers (an order, a user),
// and as a metric attribute each name would be a time series of its own.
// With it, spans and metrics carry dlock.lock.name; keep it for a small,
// fixed set of names. WithLockNameTemplate(f) gives dlock.lock.name the
// value f(name) instead: a template that maps a family of names to one
// value (order:8c1f… to order:*) keeps the series few.
package dlockotel
