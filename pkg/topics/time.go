package topics

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"time"
	"unicode/utf8"
)

// Time is a UTC instant with millisecond precision, the resolution of Kafka
// record timestamps. It always encodes in the same fixed-width form
// ("2006-01-02T15:04:05.000Z") so that equal instants give equal bytes, which
// the snapshot's determinism and its byte budget both depend on.
type Time struct{ t time.Time }

// TimeLayout is the one layout Time encodes to.
const TimeLayout = "2006-01-02T15:04:05.000Z"

// NewTime truncates t to milliseconds in UTC.
func NewTime(t time.Time) Time { return Time{t.UTC().Truncate(time.Millisecond)} }

// UnixMilliTime returns the Time of a Unix millisecond timestamp.
func UnixMilliTime(ms int64) Time { return Time{time.UnixMilli(ms).UTC()} }

// Std returns the time.Time value.
func (t Time) Std() time.Time { return t.t }

// IsZero reports whether t is the zero Time (meaning "no fact").
func (t Time) IsZero() bool { return t.t.IsZero() }

// UnixMilli returns t as Unix milliseconds.
func (t Time) UnixMilli() int64 { return t.t.UnixMilli() }

// Before reports whether t is before u.
func (t Time) Before(u Time) bool { return t.t.Before(u.t) }

// After reports whether t is after u.
func (t Time) After(u Time) bool { return t.t.After(u.t) }

// Add returns t+d.
func (t Time) Add(d time.Duration) Time { return Time{t.t.Add(d)} }

// Sub returns t-u.
func (t Time) Sub(u Time) time.Duration { return t.t.Sub(u.t) }

// String formats t in TimeLayout.
func (t Time) String() string { return t.t.Format(TimeLayout) }

// MarshalJSON encodes t in TimeLayout.
func (t Time) MarshalJSON() ([]byte, error) {
	if y := t.t.Year(); y < 0 || y > 9999 {
		return nil, fmt.Errorf("topics: time %v is outside years 0000-9999", t.t)
	}
	b := make([]byte, 0, len(TimeLayout)+2)
	b = append(b, '"')
	b = t.t.AppendFormat(b, TimeLayout)
	return append(b, '"'), nil
}

// UnmarshalJSON accepts any RFC 3339 timestamp, with or without fractional
// seconds and with any offset, and keeps it as UTC milliseconds.
//
// Its error is a *json.UnmarshalTypeError whose Value is the problem, so
// that encoding/json fills in the path of the field (see timeProblem).
func (t *Time) UnmarshalJSON(b []byte) error {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return &json.UnmarshalTypeError{Value: "want an RFC 3339 timestamp string, got " + clip(string(b), 40), Type: timeType}
	}
	p, err := ParseTime(string(b[1 : len(b)-1]))
	if err != nil {
		return &json.UnmarshalTypeError{Value: err.Error(), Type: timeType}
	}
	*t = p
	return nil
}

var timeType = reflect.TypeFor[Time]()

// timeProblem returns the field path and problem of an error from
// Time.UnmarshalJSON, as encoding/json reports it.
func timeProblem(err error) (field, problem string, ok bool) {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Type != timeType {
		return "", "", false
	}
	return te.Field, te.Value, true
}

// rfc3339 is the grammar of RFC 3339 (and of the JSON Schema's timestamp),
// which time.Parse applies loosely: it also takes a one-digit hour, a comma
// before the fraction, and offsets such as +24:00.
var rfc3339 = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$`)

// ParseTime parses an RFC 3339 timestamp into a Time.
func ParseTime(s string) (Time, error) {
	p, err := time.Parse(time.RFC3339Nano, s)
	if err == nil && !rfc3339.MatchString(s) {
		err = errors.New("not RFC 3339")
	}
	if err != nil {
		return Time{}, fmt.Errorf("want an RFC 3339 timestamp like 2026-02-14T10:40:00Z, got %q", clip(s, 40))
	}
	if y := p.UTC().Year(); y < 1 || y > 9999 || NewTime(p).IsZero() {
		return Time{}, fmt.Errorf("timestamp %q is outside years 0001-9999", clip(s, 40))
	}
	return NewTime(p), nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n-- // never cut a character in half
	}
	return s[:n] + "..."
}
