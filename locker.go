package dlock

import "context"

// Locker is what code that takes locks needs of a Client. *Client
// implements it (a plain, reentrant or Redlock Client alike): let such
// code take a Locker, and a test can give it a Client on a private server
// (see package dlocktest), or one with other options.
type Locker interface {
	Acquire(ctx context.Context, name string, opts ...LockOption) (*Lock, error)
	TryAcquire(ctx context.Context, name string, opts ...LockOption) (*Lock, error)
	Do(ctx context.Context, name string, fn func(ctx context.Context, l *Lock) error, opts ...LockOption) error
}

var _ Locker = (*Client)(nil)
