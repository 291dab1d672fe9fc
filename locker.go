package dlock

import "context"

// Locker is what code that takes locks needs of a Client, which implements it.
type Locker interface {
	Acquire(ctx context.Context, name string, opts ...LockOption) (*Lock, error)
	TryAcquire(ctx context.Context, name string, opts ...LockOption) (*Lock, error)
	Do(ctx context.Context, name string, fn func(ctx context.Context, l *Lock) error, opts ...LockOption) error
	TryDo(ctx context.Context, name string, fn func(ctx context.Context, l *Lock) error, opts ...LockOption) error
}

var _ Locker = (*Client)(nil)
