package dlock

// WithoutScripts runs no Lua: plain, unfair locks only (docs/deployments.md).
func WithoutScripts() Option {
	// (Its transactions are not pipelined; waiting is unfair, and a kind
	// that needs scripts is refused: see options.ownOn.)
	return option(func(o *options) { o.noScripts, o.pipelining = true, false })
}
