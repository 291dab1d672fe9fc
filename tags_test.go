package dlock

import (
	"strings"
	"testing"
)

// A campaign's lease tokens carry the tag 1 in the low bits of their 22nd
// character, every other kind's 0, as they always did: a token kept in
// Redis, or handed to Resume, reads the same. Resume refuses a token with
// a tag no kind declares.
func TestTokensCarryTheTagsTheyAlwaysDid(t *testing.T) {
	for _, tc := range []struct {
		k    *kind
		want byte
	}{
		{&unfairLocks, 0}, {&fairLocks, 0}, {&quorumLocks, 0}, {&reentrantLocks, 0},
		{&campaigns, 1}, {&readHolds, 0}, {&writeHolds, 0},
	} {
		token := leaseToken(".m", tc.k.tag)
		if got := strings.IndexByte(base64URL, token[21]) & 0x0f; got != int(tc.want) {
			t.Errorf("a %s lease's token %q carries the tag %d, want %d", tc.k.mode(), token, got, tc.want)
		}
	}
	for tag := range byte(16) {
		var p lease
		Resume(leaseToken("", tag)).applyLease(&p)
		if refused := p.firstInvalid != ""; refused != (tag > 1) {
			t.Errorf("Resume of a token tagged %d: refused %v (%s), want %v", tag, refused, p.firstInvalid, tag > 1)
		}
	}
}

// A kind's tag is one no other kind has, in the four bits a token carries:
// another is refused as the program starts; and a string that is no token
// (another program's value at a lock key) has a tag no kind has.
func TestATagIsOneNoOtherKindHas(t *testing.T) {
	for _, tag := range []byte{0, campaigns.tag, 16} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("tagged(%d) did not panic", tag)
				}
			}()
			tagged(tag)
		}()
	}
	for _, s := range []string{"", "hello", strings.Repeat("*", 22)} {
		if tag := tokenTag(s); tags[tag] {
			t.Errorf("tokenTag(%q) = %d, a kind's tag", s, tag)
		}
	}
}
