package topics_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/pkg/topics"
)

func TestTimeFixedWidth(t *testing.T) {
	cases := []struct {
		in   time.Time
		want string
	}{
		{time.Date(2026, 2, 14, 10, 40, 0, 0, time.UTC), "2026-02-14T10:40:00.000Z"},
		{time.Date(2026, 2, 14, 10, 40, 0, 5e6, time.UTC), "2026-02-14T10:40:00.005Z"},
		{time.Date(2026, 2, 14, 10, 40, 0, 120e6, time.UTC), "2026-02-14T10:40:00.120Z"},
		{time.Date(2026, 2, 14, 10, 40, 0, 999999999, time.UTC), "2026-02-14T10:40:00.999Z"}, // truncated, not rounded
		{time.Date(2026, 2, 14, 10, 40, 0, 999999, time.UTC), "2026-02-14T10:40:00.000Z"},
		{time.Date(5, 1, 2, 3, 4, 5, 6e6, time.UTC), "0005-01-02T03:04:05.006Z"},
		{time.Date(1, 1, 1, 0, 0, 0, 1e6, time.UTC), "0001-01-01T00:00:00.001Z"},
		{time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC), "9999-12-31T23:59:59.999Z"},
		{time.Date(2026, 2, 14, 12, 40, 0, 0, time.FixedZone("", 2*3600)), "2026-02-14T10:40:00.000Z"},
		{time.Date(2026, 2, 14, 5, 10, 0, 0, time.FixedZone("IST-ish", -5*3600-1800)), "2026-02-14T10:40:00.000Z"},
		{time.Date(2026, 1, 1, 0, 30, 0, 0, time.FixedZone("", 3600)), "2025-12-31T23:30:00.000Z"},
	}
	for _, c := range cases {
		tt := topics.NewTime(c.in)
		if got := tt.String(); got != c.want {
			t.Errorf("NewTime(%v).String() = %q, want %q", c.in, got, c.want)
		}
		b, err := json.Marshal(tt)
		if err != nil {
			t.Fatalf("Marshal(%v): %v", c.in, err)
		}
		if string(b) != `"`+c.want+`"` {
			t.Errorf("Marshal(%v) = %s, want %q", c.in, b, c.want)
		}
		if len(b) != len(topics.TimeLayout)+2 {
			t.Errorf("Marshal(%v) = %s: width %d", c.in, b, len(b))
		}
		if loc := tt.Std().Location(); loc != time.UTC {
			t.Errorf("NewTime(%v) in %v, want UTC", c.in, loc)
		}
	}
	// Inside a struct, as every message uses it.
	b, err := topics.Marshal(struct {
		At  topics.Time  `json:"at"`
		Ptr *topics.Time `json:"ptr"`
	}{At: topics.UnixMilliTime(0)})
	if err != nil || string(b) != `{"at":"1970-01-01T00:00:00.000Z","ptr":null}` {
		t.Errorf("struct = %s, %v", b, err)
	}
}

// Equal instants give equal bytes, and byte order is time order.
func TestTimeEncodingOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	lo := time.Date(1, 1, 1, 0, 0, 0, 1e6, time.UTC).UnixMilli()
	hi := time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC).UnixMilli()
	var prev topics.Time
	var prevB []byte
	for i := range 5000 {
		ms := lo + rng.Int64N(hi-lo+1)
		if i%2 == 1 {
			ms = prev.UnixMilli() + rng.Int64N(2000) - 1000 // close neighbours
			ms = max(lo, min(hi, ms))
		}
		tt := topics.UnixMilliTime(ms)
		b, err := tt.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if tt.UnixMilli() != ms {
			t.Fatalf("UnixMilliTime(%d).UnixMilli() = %d", ms, tt.UnixMilli())
		}
		var back topics.Time
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("Unmarshal(%s): %v", b, err)
		}
		if back != tt {
			t.Fatalf("round trip of %s gave %v", b, back)
		}
		if i > 0 {
			if got, want := bytes.Compare(prevB, b), cmpTime(prev, tt); got != want {
				t.Fatalf("byte order %d, time order %d: %s %s", got, want, prevB, b)
			}
		}
		prev, prevB = tt, b
	}
}

func cmpTime(a, b topics.Time) int {
	switch {
	case a.Before(b):
		return -1
	case a.After(b):
		return 1
	}
	return 0
}

func TestTimeMethods(t *testing.T) {
	a := topics.UnixMilliTime(1771065600000)
	if a.String() != "2026-02-14T10:40:00.000Z" {
		t.Errorf("UnixMilliTime = %s", a)
	}
	b := a.Add(1500 * time.Millisecond)
	if !a.Before(b) || !b.After(a) || a.After(b) || b.Before(a) || a.Before(a) {
		t.Error("Before/After")
	}
	if d := b.Sub(a); d != 1500*time.Millisecond {
		t.Errorf("Sub = %v", d)
	}
	if b.UnixMilli() != 1771065601500 {
		t.Errorf("UnixMilli = %d", b.UnixMilli())
	}
	if !a.Std().Equal(time.UnixMilli(1771065600000)) {
		t.Errorf("Std = %v", a.Std())
	}
	if a.IsZero() || !(topics.Time{}).IsZero() || !topics.NewTime(time.Time{}).IsZero() {
		t.Error("IsZero")
	}
	if topics.NewTime(time.Date(2026, 2, 14, 10, 40, 0, 0, time.UTC)) != a {
		t.Error("NewTime and UnixMilliTime of the same instant differ")
	}
	// A monotonic reading does not leak into comparisons.
	now := time.Now()
	if topics.NewTime(now) != topics.UnixMilliTime(now.UnixMilli()) {
		t.Error("NewTime(time.Now()) keeps more than UTC milliseconds")
	}
}

// TestTimeAsMilliseconds holds Time, which keeps milliseconds, to what
// time.Time truncated to UTC milliseconds says of the same instants: before
// and after the Unix epoch and year 1, and the zero Time as the zero
// time.Time.
func TestTimeAsMilliseconds(t *testing.T) {
	if s := topics.NewTime(time.Time{}).Std(); s != (time.Time{}) {
		t.Errorf("the zero Time's Std = %#v, want the zero time.Time", s)
	}
	if (topics.Time{}).UnixMilli() != (time.Time{}).UnixMilli() {
		t.Errorf("the zero Time's UnixMilli = %d, want %d", (topics.Time{}).UnixMilli(), (time.Time{}).UnixMilli())
	}
	rng := rand.New(rand.NewPCG(1, 2))
	east := time.FixedZone("east", 5*3600+1800)
	for i := range 10_000 {
		// From year -2000 to 12000, nanoseconds and a zone included.
		std := time.Unix(rng.Int64N(2*400_000_000_000)-460_000_000_000, rng.Int64N(1e9))
		if i%2 == 0 {
			std = std.In(east)
		}
		want := std.UTC().Truncate(time.Millisecond)
		got := topics.NewTime(std)
		if got.Std() != want {
			t.Fatalf("NewTime(%v).Std() = %v, want %v", std, got.Std(), want)
		}
		if got.UnixMilli() != want.UnixMilli() || topics.UnixMilliTime(want.UnixMilli()) != got {
			t.Fatalf("NewTime(%v): UnixMilli %d, want %d", std, got.UnixMilli(), want.UnixMilli())
		}
		if got.IsZero() != want.IsZero() {
			t.Fatalf("NewTime(%v).IsZero() = %v", std, got.IsZero())
		}
		other := topics.NewTime(std.Add(time.Duration(rng.Int64N(2e12) - 1e12)))
		if got.Before(other) != want.Before(other.Std()) || got.After(other) != want.After(other.Std()) || got.Sub(other) != want.Sub(other.Std()) {
			t.Fatalf("%v and %v: Before, After or Sub disagree with time.Time's", got, other)
		}
		if got.String() != want.Format(topics.TimeLayout) {
			t.Fatalf("String() = %s, want %s", got, want.Format(topics.TimeLayout))
		}
		d := time.Duration(rng.Int64N(4e12) - 2e12) // ±2,000 s, nanoseconds included
		if sum := got.Add(d); sum != topics.NewTime(want.Add(d)) {
			t.Fatalf("%v.Add(%v) = %v, want %v", got, d, sum, topics.NewTime(want.Add(d)))
		}
	}
	// Sub saturates as time.Time's does, years 1 and 9999 apart.
	first, last := time.Date(1, 1, 1, 0, 0, 0, 1e6, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
	a, b := topics.NewTime(first), topics.NewTime(last)
	if a.Sub(b) != first.Sub(last) || b.Sub(a) != last.Sub(first) {
		t.Errorf("Sub across 9,998 years = %v and %v, want %v and %v", a.Sub(b), b.Sub(a), first.Sub(last), last.Sub(first))
	}
}

func TestParseTime(t *testing.T) {
	ok := []struct{ in, want string }{
		{"2026-02-14T10:40:00Z", "2026-02-14T10:40:00.000Z"},
		{"2026-02-14T10:40:00.1Z", "2026-02-14T10:40:00.100Z"},
		{"2026-02-14T10:40:00.12Z", "2026-02-14T10:40:00.120Z"},
		{"2026-02-14T10:40:00.123Z", "2026-02-14T10:40:00.123Z"},
		{"2026-02-14T10:40:00.123456789Z", "2026-02-14T10:40:00.123Z"},
		{"2026-02-14T10:40:00.999999Z", "2026-02-14T10:40:00.999Z"},
		{"2026-02-14T10:40:00.123456789012Z", "2026-02-14T10:40:00.123Z"},
		{"2026-02-14T10:40:00+23:59", "2026-02-13T10:41:00.000Z"},
		{"2026-02-14T10:40:00+00:00", "2026-02-14T10:40:00.000Z"},
		{"2026-02-14T10:40:00-00:00", "2026-02-14T10:40:00.000Z"},
		{"2026-02-14T12:40:00+02:00", "2026-02-14T10:40:00.000Z"},
		{"2026-02-14T05:10:00.5-05:30", "2026-02-14T10:40:00.500Z"},
		{"2026-02-15T00:10:00+13:30", "2026-02-14T10:40:00.000Z"},
		{"2025-12-31T23:00:00-11:40", "2026-01-01T10:40:00.000Z"},
		{"2024-02-29T00:00:00Z", "2024-02-29T00:00:00.000Z"},
		{"0001-01-01T00:00:00.001Z", "0001-01-01T00:00:00.001Z"},
		{"9999-12-31T23:59:59.999Z", "9999-12-31T23:59:59.999Z"},
		{"0001-01-02T00:30:00+01:00", "0001-01-01T23:30:00.000Z"},
		{"0001-01-01T00:00:00-00:01", "0001-01-01T00:01:00.000Z"},
		{"0001-01-01T00:00:00.001+00:00", "0001-01-01T00:00:00.001Z"},
		{"9999-12-31T12:00:00+01:00", "9999-12-31T11:00:00.000Z"},
		{"9999-12-31T23:59:59.999-00:00", "9999-12-31T23:59:59.999Z"},
	}
	for _, c := range ok {
		got, err := topics.ParseTime(c.in)
		if err != nil {
			t.Errorf("ParseTime(%q): %v", c.in, err)
			continue
		}
		if got.String() != c.want {
			t.Errorf("ParseTime(%q) = %s, want %s", c.in, got, c.want)
		}
		if got.Std().Location() != time.UTC {
			t.Errorf("ParseTime(%q) not in UTC", c.in)
		}
	}

	bad := []struct{ in, msg string }{
		{"", "want an RFC 3339 timestamp like 2026-02-14T10:40:00Z"},
		{"2026-02-14", "want an RFC 3339 timestamp"},
		{"2026-02-14T10:40:00", "want an RFC 3339 timestamp"},
		{"2026-02-14 10:40:00Z", "want an RFC 3339 timestamp"},
		{"2026-02-14T10:40Z", "want an RFC 3339 timestamp"},
		{"2026-2-14T10:40:00Z", "want an RFC 3339 timestamp"},
		{" 2026-02-14T10:40:00Z", "want an RFC 3339 timestamp"},
		{"2026-02-14T10:40:00Z ", "want an RFC 3339 timestamp"},
		{"2026-02-30T00:00:00Z", "want an RFC 3339 timestamp"},
		{"2026-13-01T00:00:00Z", "want an RFC 3339 timestamp"},
		{"2026-02-14T24:00:00Z", "want an RFC 3339 timestamp"},
		{"2026-02-14T10:60:00Z", "want an RFC 3339 timestamp"},
		{"2026-02-14T10:40:60Z", "want an RFC 3339 timestamp"},
		{"2026-02-14T10:40:00.Z", "want an RFC 3339 timestamp"},
		{"2026-02-14T1:40:00Z", "want an RFC 3339 timestamp"},       // time.Parse takes a one-digit hour
		{"2026-02-14T10:40:00,5Z", "want an RFC 3339 timestamp"},    // and a comma before the fraction
		{"2026-02-14T10:40:00+24:00", "want an RFC 3339 timestamp"}, // and hour 24 in the offset
		{"2026-02-14T10:40:00+01:60", "want an RFC 3339 timestamp"}, // and minute 60
		{"2026-02-14t10:40:00z", "want an RFC 3339 timestamp"},
		{"2026-02-14T10:40:00.5z", "want an RFC 3339 timestamp"},
		{"2026-02-14T10:40:00+0200", "want an RFC 3339 timestamp"},
		{"2026-02-14T10:40:00+02", "want an RFC 3339 timestamp"},
		{"2026-02-14T10:40:00 UTC", "want an RFC 3339 timestamp"},
		{"1771065600000", "want an RFC 3339 timestamp"},
		{"Sat, 14 Feb 2026 10:40:00 GMT", "want an RFC 3339 timestamp"},
		{"+12026-02-14T10:40:00Z", "want an RFC 3339 timestamp"},
		{"10000-01-01T00:00:00Z", "want an RFC 3339 timestamp"},
		{"-0001-01-01T00:00:00Z", "want an RFC 3339 timestamp"},
		{"0000-01-01T00:00:00Z", "outside years 0001-9999"},
		{"0000-12-31T23:59:59.999Z", "outside years 0001-9999"},
		{"0001-01-01T00:00:00Z", "outside years 0001-9999"}, // the zero time means "no fact"
		{"0001-01-01T00:00:00.0009Z", "outside years 0001-9999"},
		{"0001-01-01T01:00:00+01:00", "outside years 0001-9999"}, // the zero instant, with an offset
		{"0001-01-01T00:30:00+01:00", "outside years 0001-9999"}, // year 0 in UTC
		{"9999-12-31T23:00:00-01:00", "outside years 0001-9999"}, // year 10000 in UTC
		// Within the range in UTC, but with an offset on the first or last
		// day, which the schemas' pattern cannot tell from outside it.
		{"0001-01-01T12:00:00+01:00", "at an end of years 0001-9999 with an offset away from UTC; write it in UTC (Z)"},
		{"0001-01-01T23:59:59.999+00:01", "at an end of years 0001-9999"},
		{"9999-12-31T01:00:00-01:00", "at an end of years 0001-9999"},
		{strings.Repeat("9", 100), "want an RFC 3339 timestamp"},
	}
	for _, c := range bad {
		got, err := topics.ParseTime(c.in)
		if err == nil {
			t.Errorf("ParseTime(%q) = %v, want an error", c.in, got)
			continue
		}
		if !strings.Contains(err.Error(), c.msg) {
			t.Errorf("ParseTime(%q) = %q, want %q", c.in, err, c.msg)
		}
		if !got.IsZero() {
			t.Errorf("ParseTime(%q) returned %v with its error", c.in, got)
		}
		if len(err.Error()) > 150 {
			t.Errorf("ParseTime(%q): long message %q: the input should be clipped", c.in, err)
		}
	}
}

func TestTimeUnmarshalJSON(t *testing.T) {
	var tt topics.Time
	if err := json.Unmarshal([]byte(`"2026-02-14T12:40:00.5+02:00"`), &tt); err != nil || tt.String() != "2026-02-14T10:40:00.500Z" {
		t.Errorf("Unmarshal = %v, %v", tt, err)
	}
	for _, in := range []string{`null`, `5`, `"`, `""`, `"yesterday"`, `{}`, `true`, `"0000-01-01T00:00:00Z"`} {
		var tt topics.Time
		err := tt.UnmarshalJSON([]byte(in))
		if err == nil {
			t.Errorf("UnmarshalJSON(%s) = %v, want an error", in, tt)
			continue
		}
		if !strings.Contains(err.Error(), "RFC 3339") && !strings.Contains(err.Error(), "outside years") {
			t.Errorf("UnmarshalJSON(%s) = %q", in, err)
		}
	}
	// Inside a struct, the error names the field.
	var v struct {
		Lease struct {
			ExpiresAt topics.Time `json:"expires_at"`
		} `json:"lease"`
	}
	err := json.Unmarshal([]byte(`{"lease":{"expires_at":"soon"}}`), &v)
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Field != "lease.expires_at" {
		t.Errorf("error %v does not name lease.expires_at", err)
	}
}

func TestTimeMarshalOutOfRange(t *testing.T) {
	for _, y := range []int{-1, 10000, 12026} {
		tt := topics.NewTime(time.Date(y, 6, 1, 0, 0, 0, 0, time.UTC))
		if b, err := tt.MarshalJSON(); err == nil {
			t.Errorf("MarshalJSON(year %d) = %s, want an error", y, b)
		} else if !strings.Contains(err.Error(), "outside years") {
			t.Errorf("MarshalJSON(year %d): %v", y, err)
		}
		if _, err := json.Marshal(struct{ T topics.Time }{tt}); err == nil {
			t.Errorf("json.Marshal(year %d) succeeded", y)
		}
	}
}
