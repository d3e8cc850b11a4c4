package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"unicode/utf8"

	"github.com/clipperhouse/uax29/v2/graphemes"
)

// The string cuts (docs/CONTRACT.md "Cuts"). A snapshot's strings are
// bounded by Limits.MaxStringLength characters (Unicode code points). A
// longer string is cut, and always between two grapheme clusters, so that
// no character a reader sees (an emoji with its modifiers, a letter with
// its combining accent, a Devanagari conjunct such as क्ष) is split. The
// clusters are those of Unicode 17's UAX #29, rule GB9c for Indic
// conjuncts included (github.com/clipperhouse/uax29, which runs Unicode's
// own GraphemeBreakTest). An id is cut so that it stays an id:
// distinct ids stay distinct, and anyone holding the whole id can compute
// its cut and match it.

// idHashLen is how many hex digits of the id's hash a cut id ends with.
const idHashLen = 8

// CutText cuts s to at most limit code points, at the last grapheme cluster
// boundary that allows, and says whether it cut.
func CutText(s string, limit int) (string, bool) {
	if len(s) <= limit || utf8.RuneCountInString(s) <= limit {
		return s, false
	}
	end, n := 0, 0
	g := graphemes.FromString(s)
	for g.Next() {
		c := utf8.RuneCountInString(g.Value())
		if n+c > limit {
			break
		}
		end, n = g.End(), n+c
	}
	return s[:end], true
}

// CutID cuts an id longer than limit code points to a prefix of it (cut as
// CutText cuts), "~" and the first 8 hex digits of the SHA-256 of the whole
// id's UTF-8, limit code points in all; under 10 code points, to the first
// limit of those digits. It says whether it cut. Ids a producer sends have no
// control characters, and canopy's snapshots and triggers carry them cut
// this way.
func CutID(s string, limit int) (string, bool) {
	if len(s) <= limit || utf8.RuneCountInString(s) <= limit {
		return s, false
	}
	sum := sha256.Sum256([]byte(s))
	h := hex.EncodeToString(sum[:(idHashLen+2)/2]) // the most digits a cut id has: 9, under 10 code points
	if limit < idHashLen+2 {
		return h[:max(limit, 0)], true
	}
	prefix, _ := CutText(s, limit-idHashLen-1)
	return prefix + "~" + h[:idHashLen], true
}
