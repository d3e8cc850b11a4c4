package topics

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"time"
	"unicode/utf8"
)

// Time is a UTC instant with millisecond precision, the resolution of Kafka
// record timestamps. It always encodes in the same fixed-width form
// ("2006-01-02T15:04:05.000Z") so that equal instants give equal bytes, which
// the snapshot's determinism and its byte budget both depend on.
//
// It is held as milliseconds, 8 bytes with no pointer, rather than as a
// time.Time (24 bytes with one): a projected node holds nine of them, and
// every node of every run in memory is heap the collector scans.
type Time struct {
	// ms counts milliseconds since the zero time.Time (January 1, year 1,
	// UTC), so that the zero Time is the zero time.Time.
	ms int64
}

// zeroUnixMilli is the zero time.Time in Unix milliseconds.
const zeroUnixMilli = -62135596800000

// TimeLayout is the one layout Time encodes to.
const TimeLayout = "2006-01-02T15:04:05.000Z"

// NewTime truncates t to milliseconds in UTC.
func NewTime(t time.Time) Time { return Time{t.UnixMilli() - zeroUnixMilli} }

// UnixMilliTime returns the Time of a Unix millisecond timestamp.
func UnixMilliTime(ms int64) Time { return Time{ms - zeroUnixMilli} }

// Std returns the time.Time value, in UTC.
func (t Time) Std() time.Time { return time.UnixMilli(t.ms + zeroUnixMilli).UTC() }

// IsZero reports whether t is the zero Time (meaning "no fact").
func (t Time) IsZero() bool { return t.ms == 0 }

// UnixMilli returns t as Unix milliseconds.
func (t Time) UnixMilli() int64 { return t.ms + zeroUnixMilli }

// Before reports whether t is before u.
func (t Time) Before(u Time) bool { return t.ms < u.ms }

// After reports whether t is after u.
func (t Time) After(u Time) bool { return t.ms > u.ms }

// Add returns t+d, truncated to milliseconds (towards the past, as NewTime
// truncates).
func (t Time) Add(d time.Duration) Time {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond < 0 {
		ms--
	}
	return Time{t.ms + ms}
}

// Sub returns t-u; beyond what a Duration holds (about 292 years), its
// largest or smallest, as time.Time.Sub does.
func (t Time) Sub(u Time) time.Duration {
	const most = math.MaxInt64 / int64(time.Millisecond)
	switch d := t.ms - u.ms; {
	case d > most:
		return math.MaxInt64
	case d < -most:
		return math.MinInt64
	default:
		return time.Duration(d) * time.Millisecond
	}
}

// String formats t in TimeLayout.
func (t Time) String() string { return t.Std().Format(TimeLayout) }

// MarshalJSON encodes t in TimeLayout.
func (t Time) MarshalJSON() ([]byte, error) {
	std := t.Std()
	if y := std.Year(); y < 0 || y > 9999 {
		return nil, fmt.Errorf("topics: time %v is outside years 0000-9999", std)
	}
	b := make([]byte, 0, len(TimeLayout)+2)
	b = append(b, '"')
	b = std.AppendFormat(b, TimeLayout)
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

// isRFC3339 reports whether s follows the grammar of RFC 3339 (and of the
// JSON Schema's timestamp), which time.Parse applies loosely: it also takes
// a one-digit hour, a comma before the fraction, and offsets such as +24:00.
// It is the regular expression
//
//	^[0-9]{4}-[0-9]{2}-[0-9]{2}T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$
//
// written out, because every event's time is checked with it (the test
// holds the two to the same answers).
func isRFC3339(s string) bool {
	digits := func(s string) bool {
		for i := range len(s) {
			if s[i] < '0' || s[i] > '9' {
				return false
			}
		}
		return true
	}
	// hh:mm with hh 00-23 and mm 00-59
	hourMinute := func(s string) bool {
		return digits(s[0:2]) && (s[0] < '2' || s[0] == '2' && s[1] <= '3') && s[2] == ':' && digits(s[3:5]) && s[3] <= '5'
	}
	// 2006-01-02T15:04:05 is 19 bytes, and an offset at least 1 more.
	if len(s) < 20 || !digits(s[0:4]) || s[4] != '-' || !digits(s[5:7]) || s[7] != '-' || !digits(s[8:10]) || s[10] != 'T' ||
		!hourMinute(s[11:16]) || s[16] != ':' || !digits(s[17:19]) || s[17] > '5' {
		return false
	}
	rest := s[19:]
	if rest[0] == '.' {
		n := 1
		for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
			n++
		}
		if n == 1 {
			return false
		}
		rest = rest[n:]
	}
	switch {
	case rest == "Z":
		return true
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-'):
		return hourMinute(rest[1:])
	}
	return false
}

// parseTime is time.Parse of an RFC 3339 timestamp, with the grammar's
// checks that time.Parse leaves out (isRFC3339); the form nearly every
// producer sends, in UTC, is read without it (parseUTC).
func parseTime(s string) (time.Time, error) {
	if p, ok := parseUTC(s); ok {
		return p, nil
	}
	p, err := time.Parse(time.RFC3339Nano, s)
	if err == nil && !isRFC3339(s) {
		err = errors.New("not RFC 3339")
	}
	return p, err
}

// parseUTC reads YYYY-MM-DDTHH:MM:SS[.fraction]Z, with 1 to 9 digits of
// fraction, a valid date and a year from 0001, as time.Parse does; ok is
// false for any other text (time.Parse then says what it is). It is a
// fifth of the cost of time.Parse, which was a tenth of decoding an event
// (FuzzParseUTC holds the two to the same answers).
func parseUTC(s string) (_ time.Time, ok bool) {
	if len(s) < 20 || len(s) > 30 || s[len(s)-1] != 'Z' || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' {
		return time.Time{}, false
	}
	num := func(from, to int) int {
		n := 0
		for i := from; i < to; i++ {
			c := s[i]
			if c < '0' || c > '9' {
				ok = false
				return 0
			}
			n = n*10 + int(c-'0')
		}
		return n
	}
	ok = true
	year, month, day := num(0, 4), num(5, 7), num(8, 10)
	hour, minute, sec := num(11, 13), num(14, 16), num(17, 19)
	ns := 0
	if frac := s[19 : len(s)-1]; frac != "" {
		if frac[0] != '.' || len(frac) < 2 || len(frac) > 10 {
			return time.Time{}, false
		}
		ns = num(20, len(s)-1)
		for range 10 - len(frac) {
			ns *= 10
		}
	}
	if !ok || year < 1 || month < 1 || month > 12 || day < 1 || day > daysIn(time.Month(month), year) ||
		hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, ns, time.UTC), true
}

// daysIn is the number of days of month in year.
func daysIn(month time.Month, year int) int {
	return time.Date(year, month+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

// ParseTime parses an RFC 3339 timestamp into a Time.
func ParseTime(s string) (Time, error) {
	p, err := parseTime(s)
	if err != nil {
		return Time{}, fmt.Errorf("want an RFC 3339 timestamp like 2026-02-14T10:40:00Z, got %q", clip(s, 40))
	}
	if y := p.UTC().Year(); y < 1 || y > 9999 || NewTime(p).IsZero() {
		return Time{}, fmt.Errorf("timestamp %q is outside years 0001-9999", clip(s, 40))
	}
	// On the first day of the range a positive offset may take a time out
	// of it, and on the last day a negative one: whether it does compares
	// the time with the offset, which a JSON Schema pattern cannot, so the
	// contract refuses those offsets on those two days whatever the time
	// (the schemas' timestamp does too): write them in UTC.
	if _, off := p.Zone(); off > 0 && p.Year() == 1 && p.YearDay() == 1 || off < 0 && p.Year() == 9999 && p.Month() == 12 && p.Day() == 31 {
		return Time{}, fmt.Errorf("timestamp %q is at an end of years 0001-9999 with an offset away from UTC; write it in UTC (Z)", clip(s, 40))
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
