package dlock

// WithoutScripts runs no Lua: plain, unfair locks only (docs/deployments.md).
func WithoutScripts() Option {
	return option(func(o *options) { o.noScripts = true })
}
