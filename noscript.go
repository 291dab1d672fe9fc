package dlock

// WithoutScripts runs no Lua: plain, unfair locks only (docs/deployments.md).
func WithoutScripts() Option {
	return option(func(o *options) { o.noScripts = true })
}

// scriptFree applies WithoutScripts to the other options: it turns
// pipelining off (waiting is unfair, and a kind that needs scripts is
// refused: see options.own).
func (o *options) scriptFree() {
	o.pipelining = o.pipelining && !o.noScripts
}
