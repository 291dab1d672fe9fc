package dlock

// WithoutScripts makes the Client run no Lua scripts, for Redis users that may
// not: plain locks keep their guarantees at 3–4 round trips an operation,
// waiting unfairly; other kinds are refused. See docs/deployments.md.
func WithoutScripts() Option {
	return option(func(o *options) { o.noScripts = true })
}

// scriptFree applies WithoutScripts to the other options: it turns
// pipelining off (waiting is unfair, and a kind that needs scripts is
// refused: see options.own).
func (o *options) scriptFree() {
	o.pipelining = o.pipelining && !o.noScripts
}
