package topics

import (
	"regexp"
	"testing"
	"time"
)

// rfc3339 is the grammar isRFC3339 is written out from.
var rfc3339 = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$`)

var rfc3339Cases = []string{
	"", "2026-02-14T10:40:00Z", "2026-02-14T10:40:00.123Z", "2026-02-14T10:40:00.Z", "2026-02-14T10:40:00.1234567891Z",
	"2026-02-14T10:40:00+05:30", "2026-02-14T10:40:00-23:59", "2026-02-14T10:40:00+24:00", "2026-02-14T10:40:00+05:60",
	"2026-02-14T24:00:00Z", "2026-02-14T23:59:59Z", "2026-02-14T19:59:59Z", "2026-02-14T10:60:00Z", "2026-02-14T10:40:60Z",
	"2026-02-14t10:40:00Z", "2026-02-14T10:40:00z", "2026-02-14 10:40:00Z", "2026-02-14T1:40:00Z", "2026-02-14T10:40:00,5Z",
	"2026-2-14T10:40:00Z", "20260-02-14T10:40:00Z", "2026-02-14T10:40:00", "2026-02-14T10:40:00Z ", "x026-02-14T10:40:00Z",
	"2026-02-14T10:40:00+0530", "2026-02-14T10:40:00+05:3", "2026-02-14T10:40:00.5+05:30", "9999-99-99T00:00:00Z",
	"2026-02-14T10:40:00Zjunk", "2026-02-14T10:40:00.123", "2026-02-14T10:40:00+05:30:00",
}

func TestIsRFC3339IsTheGrammar(t *testing.T) {
	for _, c := range rfc3339Cases {
		if got, want := isRFC3339(c), rfc3339.MatchString(c); got != want {
			t.Errorf("isRFC3339(%q) = %v, the grammar says %v", c, got, want)
		}
	}
}

func FuzzIsRFC3339(f *testing.F) {
	for _, c := range rfc3339Cases {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := isRFC3339(s), rfc3339.MatchString(s); got != want {
			t.Fatalf("isRFC3339(%q) = %v, the grammar says %v", s, got, want)
		}
	})
}

// FuzzParseUTC holds parseUTC to time.Parse: where it reads a timestamp,
// time.Parse reads the same instant and location from it, and the grammar
// accepts it.
func FuzzParseUTC(f *testing.F) {
	for _, c := range append(rfc3339Cases, "0001-01-01T00:00:00Z", "0000-01-01T00:00:00Z", "2024-02-29T00:00:00Z",
		"2025-02-29T00:00:00Z", "2026-04-31T00:00:00Z", "2026-12-31T23:59:59.999999999Z", "2026-12-31T23:59:59.1234567890Z",
		"2026-00-10T00:00:00Z", "2026-13-10T00:00:00Z", "2026-01-00T00:00:00Z", "2026-01-01T00:00:00.Z", "+026-01-01T00:00:00Z") {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseUTC(s)
		if !ok {
			return
		}
		want, err := time.Parse(time.RFC3339Nano, s)
		if err != nil || !isRFC3339(s) {
			t.Fatalf("parseUTC(%q) = %v; time.Parse says %v, the grammar %v", s, got, err, isRFC3339(s))
		}
		if !got.Equal(want) || got.Location() != want.Location() {
			t.Fatalf("parseUTC(%q) = %v, time.Parse %v", s, got, want)
		}
	})
}

// TestParseUTCReadsTheCommonForm: the fast path is taken for what
// producers send, so that FuzzParseUTC's seeds exercise it.
func TestParseUTCReadsTheCommonForm(t *testing.T) {
	for _, s := range []string{"2026-02-14T10:40:00Z", "2026-02-14T10:40:00.123Z", "2024-02-29T23:59:59.999999999Z", "0001-01-01T00:00:00Z"} {
		if _, ok := parseUTC(s); !ok {
			t.Errorf("parseUTC(%q) is not read", s)
		}
	}
	for _, s := range []string{"2025-02-29T00:00:00Z", "0000-01-01T00:00:00Z", "2026-02-14T10:40:00+01:00", "2026-02-14T10:40:60Z", "2026-02-14T10:40:00.1234567890Z"} {
		if _, ok := parseUTC(s); ok {
			t.Errorf("parseUTC(%q) is read; it is for time.Parse", s)
		}
	}
}
