// Package dlockprom exports a dlock Client's metrics to Prometheus.
//
//	c, err := dlock.New(rdb)
//	…
//	col, err := dlockprom.NewCollector(c)
//	…
//	prometheus.MustRegister(col)
//
// It is a module of its own, so that the library's module keeps go-redis
// as its only dependency.
//
// The counters and the gauge are read from Client.Stats when the registry
// gathers (counts since the Client was made); the histograms are fed by an
// Observer that NewCollector adds to the Client (operations from then on):
//
//	dlock_acquire_duration_seconds{mode,outcome}  histogram  the time an acquisition took, its wait included;
//	                                                         outcome acquired, not_acquired or error
//	dlock_hold_duration_seconds{mode,outcome}     histogram  how long a lease was held: until its release
//	                                                         (outcome released) or its loss (lost)
//	dlock_acquisitions_total{outcome}             counter    acquisitions: acquired or not_acquired
//	dlock_releases_total                          counter    releases of a lease that still held the lock
//	dlock_errors_total                            counter    acquisitions and releases that failed with an
//	                                                         error from Redis
//	dlock_locks_lost_total                        counter    leases lost before their release
//	dlock_extend_failures_total                   counter    extensions that failed (the watchdog retries
//	                                                         until the lease's validity runs out)
//	dlock_observer_panics_total                   counter    panics recovered in the Client's Observer functions
//	dlock_waiters                                 gauge      Acquire calls waiting now for a lock that is taken
//	dlock_held{mode}                              gauge      leases held now (Client.Held), from their
//	                                                         acquisition to their release or loss
//	dlock_redis_calls_total                       counter    script calls sent through the pipelining batcher
//	dlock_redis_writes_total                      counter    the pipelines (or lone calls) that carried them:
//	                                                         calls/writes is the mean batch (0 and 0 with
//	                                                         WithoutScripts())
//
// mode is Event.Mode: fair, unfair, reentrant, quorum, semaphore (a
// permit), election (a campaign), read or write (holds of a read-write
// lock). A lock found taken, or an Acquire whose context ended while it
// waited, is not_acquired: an outcome of normal work, not an error. A Release that finds its lease already
// gone returns an error wrapping dlock.ErrNotHeld and records no hold
// time.
//
// No metric carries the lock's name unless WithNameLabel gives the
// histograms a name label through a template: each name would be a time
// series of its own, and names are often built from identifiers, so the
// template maps a family of names to one value (order:8c1f… to order:*).
// The traces of extra/dlockotel can carry the name, and dlock.SlogObserver
// logs it.
//
// WithNamespace puts a prefix before the names, WithConstLabels adds fixed
// labels (to register the Collectors of two Clients in one registry), and
// WithAcquireBuckets and WithHoldBuckets change the histograms' buckets.
package dlockprom
