package snapshot_test

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/canopy-dev/canopy/pkg/snapshot"
)

// TestCutID: an id over the bound is cut to a prefix, "~" and 8 hex digits
// of its SHA-256, within the bound: two ids that share their first 200
// characters stay distinct, the same id always cuts alike, an id at the
// bound is left alone, and a bound under 10 keeps only hash digits.
func TestCutID(t *testing.T) {
	shared := strings.Repeat("agent/", 40) // 240 characters
	a, b := shared+"one", shared+"two"
	ca, cutA := snapshot.CutID(a, 160)
	cb, _ := snapshot.CutID(b, 160)
	if !cutA || ca == cb || utf8.RuneCountInString(ca) != 160 || utf8.RuneCountInString(cb) != 160 {
		t.Fatalf("cut %q and %q: want two distinct ids of 160 characters", ca, cb)
	}
	sum := fmt.Sprintf("%x", sha256.Sum256([]byte(a)))
	if want := a[:151] + "~" + sum[:8]; ca != want {
		t.Fatalf("CutID = %q, want %q", ca, want)
	}
	if again, _ := snapshot.CutID(a, 160); again != ca {
		t.Fatalf("the same id cut twice: %q and %q", ca, again)
	}
	at := strings.Repeat("ß", 160)
	if c, cut := snapshot.CutID(at, 160); cut || c != at {
		t.Fatalf("an id of exactly 160 characters was cut: %q", c)
	}
	if c, cut := snapshot.CutID(a, 6); !cut || c != sum[:6] {
		t.Fatalf("CutID(a, 6) = %q, want the hash's first 6 digits %q", c, sum[:6])
	}
}

// TestCutText: text is cut between grapheme clusters, never inside one (a
// combining accent, an emoji sequence, a flag), to at most the bound in
// code points.
func TestCutText(t *testing.T) {
	a := strings.Repeat("a", 158)
	for _, c := range []struct{ in, want string }{
		{a + "e\u0301x", a + "e\u0301"},        // é fits whole
		{a + "x" + "e\u0301", a + "x"},         // é would need 161
		{a + "x" + "👩\u200d👩\u200d👧", a + "x"}, // a family is one cluster of 5
		{a + "🇺🇳", a + "🇺🇳"},                   // a flag is two code points: exactly 160
		{a + "x🇺🇳", a + "x"},                   // not half a flag
		{strings.Repeat("😀", 170), strings.Repeat("😀", 160)},
	} {
		got, cut := snapshot.CutText(c.in, 160)
		if got != c.want || cut != (got != c.in) || utf8.RuneCountInString(got) > 160 {
			t.Errorf("CutText(…%q) = …%q (cut %v), want …%q", tail(c.in), tail(got), cut, tail(c.want))
		}
	}
}

func tail(s string) string {
	r := []rune(s)
	return string(r[max(0, len(r)-6):])
}

// TestCutKeepsIndicConjuncts: a Devanagari conjunct (a consonant, virama
// and consonant: क्ष, न्ह, त्र, and क्ष्म, two viramas) is one grapheme
// cluster under Unicode 15.1's rule GB9c, and a cut at any bound that falls
// inside one leaves it out whole, as it does an accented letter.
func TestCutKeepsIndicConjuncts(t *testing.T) {
	for _, conj := range []string{"क्ष", "न्ह", "त्र", "क्ष्म", "ज्ञ", "स्\u200dत"} {
		n := utf8.RuneCountInString(conj)
		prefix := strings.Repeat("a", 10)
		s := prefix + conj + "ा" + "b" // with a vowel sign after, as in क्षा
		for bound := 11; bound < 10+n+1; bound++ {
			got, cut := snapshot.CutText(s, bound)
			if !cut || got != prefix {
				t.Errorf("CutText(%q, %d) = %q: want the conjunct and its vowel sign left out whole, %q", s, bound, got, prefix)
			}
		}
		if got, _ := snapshot.CutText(s, 10+n+1); got != prefix+conj+"ा" {
			t.Errorf("CutText(%q, %d) = %q, want the whole syllable", s, 10+n+1, got)
		}
		// An id is cut the same way before its hash: its prefix of at
		// most 151 code points ends inside the conjunct, so without it.
		id := strings.Repeat("x", 149) + conj + strings.Repeat("y", 20)
		want := strings.Repeat("x", 149) + "~" + fmt.Sprintf("%x", sha256.Sum256([]byte(id)))[:8]
		if got, _ := snapshot.CutID(id, 160); got != want {
			t.Errorf("CutID(…%q…, 160) = …%q, want …%q", conj, got[145:], want[145:])
		}
	}
}

// BenchmarkCutText is the cost of cutting a text at a bound inside it: an
// ASCII one, and one of mixed scripts and emoji sequences.
func BenchmarkCutText(b *testing.B) {
	for _, c := range []struct{ name, s string }{
		{"ascii", strings.Repeat("worker-", 40)},
		{"mixed", strings.Repeat("wörker 工作者 क्षत्रिय 👩🏽\u200d💻 e\u0301 🇳🇴 ", 10)},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				snapshot.CutText(c.s, 160)
			}
		})
	}
}
