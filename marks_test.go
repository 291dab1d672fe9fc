package dlock

import (
	"strings"
	"testing"
)

// A leadership's lease token begins with "e:", readable at its key with
// redis-cli, every other kind's with its 22 random base64url characters:
// the key's type cannot tell a leader from a plain lock (both a string
// holding the token), its token's mark does. Resume takes both, and
// refuses a mark no kind declares.
func TestOnlyALeadersTokensBeginWithItsMark(t *testing.T) {
	for _, tc := range []struct {
		k    *kind
		want string
	}{
		{&unfairLocks, ""}, {&fairLocks, ""}, {&quorumLocks, ""}, {&reentrantLocks, ""},
		{&campaigns, "e:"}, {&readHolds, ""}, {&writeHolds, ""},
	} {
		token := leaseToken(".m", tc.k.mark)
		random, _, _ := strings.Cut(strings.TrimPrefix(token, tc.want), ".")
		if !strings.HasPrefix(token, tc.want) || len(random) != 22 || strings.Contains(random, ":") || tokenMark(token) != tc.want {
			t.Errorf("a %s lease's token %q: mark %q, want %q and 22 random characters", tc.k.mode(), token, tokenMark(token), tc.want)
		}
		var p lease
		if Resume(token).applyLease(&p); p.firstInvalid != "" {
			t.Errorf("Resume(%q) refused: %s", token, p.firstInvalid)
		}
	}
	var p lease
	if Resume("x:" + leaseToken("", "")).applyLease(&p); p.firstInvalid == "" {
		t.Errorf("Resume of a token with a mark no kind declares was taken")
	}
}

// A string that is no token (another program's value at a lock key) has a
// mark no kind has, even when it begins with one; a token whose metadata
// holds a mark has none.
func TestAValueThatIsNoTokenHasNoKindsMark(t *testing.T) {
	for _, s := range []string{"", "hello", "e:", "e:hello", "e:" + strings.Repeat("*", 22), strings.Repeat("A", 22) + " x"} {
		if m := tokenMark(s); m == "" || m == campaigns.mark {
			t.Errorf("tokenMark(%q) = %q, a kind's mark", s, m)
		}
	}
	if s := leaseToken(metaSuffix("e:x"), ""); tokenMark(s) != "" {
		t.Errorf("tokenMark(%q) = %q, want none", s, tokenMark(s))
	}
}

// A token without a mark whose 22nd character carries the tag 1 in its
// four low bits is a leader's that a version of dlock before the marks
// took, and reads as one; another tag (2 to 15) as no kind's; 0, every new
// token's, as none.
func TestALeadersTokenFromBeforeTheMarksReadsAsALeaders(t *testing.T) {
	for c, want := range map[byte]string{'Q': "", 'R': campaigns.mark, 'S': "?", 'f': "?", 'g': ""} {
		if s := strings.Repeat("Q", 21) + string(c) + ".node-a"; tokenMark(s) != want {
			t.Errorf("tokenMark(%q) = %q, want %q", s, tokenMark(s), want)
		}
	}
}

// A mark that overlaps one registered already (the same, or one beginning
// with the other) panics as it registers, and registers nothing: two kinds
// would share their tokens' mark.
func TestAnOverlappingMarkPanicsUnregistered(t *testing.T) {
	for _, mark := range []string{"e:", "e:x", "e"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("marked(%q) beside the campaign's e: did not panic", mark)
				}
			}()
			marked(mark, 0)
		}()
		if _, ok := marks[mark]; ok && mark != "e:" {
			t.Errorf("marked(%q) registered the overlapping mark", mark)
		}
	}
}
