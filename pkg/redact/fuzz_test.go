package redact_test

import (
	"testing"
	"unicode/utf8"

	"github.com/canopy-dev/canopy/pkg/redact"
)

// FuzzRedact: whatever the text and the limit, redaction does not panic,
// gives valid UTF-8 within the limit, counts each replacement once, and
// is idempotent: redacting its result again changes and counts nothing.
// It runs the built-in rules and a policy with operator patterns that
// match short text (replacements longer than what they replace, which the
// limit must absorb) and the markers' own characters.
func FuzzRedact(f *testing.F) {
	for _, c := range builtinCases {
		f.Add(c.in, uint16(0))
		f.Add(c.nearMiss, uint16(0))
		f.Add(c.in, uint16(len(c.in)/2))
	}
	f.Add("aaaa Bearer 0123456789abcdefXYZ", uint16(12))
	f.Add("a\xffb sk-proj-Ab3dEf6hIj9kLmN0pQrStUvWxYz12", uint16(20))
	f.Add("redacted]redacted:[", uint16(5))
	policies := []*redact.Policy{redact.Default()}
	var pats []redact.PatternRule
	for _, s := range []string{`short=[aeiou]`, `bracket=\[[a-z]+`, `word=\bredacted\b`, `digits=[0-9]{2,}`} {
		r, err := redact.ParsePatternRule(s)
		if err != nil {
			f.Fatal(err)
		}
		pats = append(pats, r)
	}
	p, err := redact.New(redact.Config{Patterns: pats})
	if err != nil {
		f.Fatal(err)
	}
	policies = append(policies, p)
	f.Fuzz(func(t *testing.T, s string, limit uint16) {
		for i, p := range policies {
			calls := 0
			out, n := p.Text(s, int(limit), func(string) { calls++ })
			if !utf8.ValidString(out) {
				t.Fatalf("policy %d: Text(%q, %d) = %q: not valid UTF-8", i, s, limit, out)
			}
			if limit > 0 && utf8.RuneCountInString(out) > int(limit) && out != "[redacted:overflow]" {
				t.Fatalf("policy %d: Text(%q, %d) = %q: over the limit", i, s, limit, out)
			}
			if n != calls {
				t.Fatalf("policy %d: Text(%q, %d): %d replacements, %d calls", i, s, limit, n, calls)
			}
			again, n2 := p.Text(out, int(limit), nil)
			if again != out || n2 != 0 {
				t.Fatalf("policy %d: not idempotent: Text(%q, %d) = %q, and again %q (%d replacements)", i, s, limit, out, again, n2)
			}
		}
	})
}
