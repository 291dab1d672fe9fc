package backend

import (
	"errors"
	"testing"
)

// A quorum and a backend without scripts carry plain locks and no other
// kind, each refusing the others with its own reason; a Node carries every
// kind. A kind built on the plain lock's type (the fair lock, the
// campaign) is refused as the others are.
func TestOnlyPlainLocksAreCarriedOverAQuorumAndWithoutScripts(t *testing.T) {
	for _, tc := range []struct {
		what string
		k    Kind
	}{
		{"a plain lock", PlainLock}, {"a fair lock", FairLock}, {"a reentrant lock", ReentrantLock},
		{"a campaign", Campaign}, {"a read", Read}, {"a write", Write}, {"a downgrading hold", Downgrading},
		{"a permit", Permits(3, 1)}, {"a permit of the kept size", Permits(0, 1)},
	} {
		var over, free error
		if tc.k != PlainLock {
			over, free = ErrOverQuorum, ErrNeedsScripts
		}
		if err := (&Quorum{}).Carries(tc.k); err != over {
			t.Errorf("a quorum's Carries(%s) = %v, want %v", tc.what, err, over)
		}
		if err := (NoScripts{}).Carries(tc.k); err != free {
			t.Errorf("Carries(%s) without scripts = %v, want %v", tc.what, err, free)
		}
		if err := (Node{}).Carries(tc.k); err != nil {
			t.Errorf("a Node's Carries(%s) = %v, want nil", tc.what, err)
		}
	}
}

// A backend without scripts refuses a claim of any kind it does not carry
// in each call that takes one, unsent: its Acquire, Extend, Release, Undo
// and Fence. (A zero NoScripts has no connection: a call that sent would
// panic.)
func TestNoScriptsRefusesAClaimOfAKindItDoesNotCarryUnsent(t *testing.T) {
	ctx := t.Context()
	for _, k := range []Kind{FairLock, ReentrantLock, Campaign, Read, Write, Permits(3, 1)} {
		c := &Claim{Kind: k, Token: "t"}
		var n NoScripts
		_, acquire := n.Acquire(ctx, c, 1e9, true)
		_, extend := n.Extend(ctx, c, 1e9, 1)
		_, release := n.Release(ctx, c)
		undo := n.Undo(ctx, c)
		_, fence := n.Fence(ctx, c)
		for call, err := range map[string]error{"Acquire": acquire, "Extend": extend, "Release": release, "Undo": undo, "Fence": fence} {
			if !errors.Is(err, ErrNeedsScripts) || !errors.Is(err, ErrNotSent) {
				t.Errorf("%s of %s without scripts = %v, want ErrNeedsScripts, unsent", call, k.what(), err)
			}
		}
	}
}

// Every Kind can be compared with ==, as the root package compares a
// claim's Kind with Write and Downgrading: none holds a value that would
// make == panic.
func TestEveryKindIsComparable(t *testing.T) {
	for _, k := range []Kind{PlainLock, FairLock, ReentrantLock, Campaign, Read, Write, Downgrading, Permits(3, 1), Permits(0, 2)} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s (%T) == itself panicked: %v", k.what(), k, r)
				}
			}()
			if k != k { //nolint:staticcheck // (the comparison is the test)
				t.Errorf("%s (%T) is not equal to itself", k.what(), k)
			}
		}()
	}
}
