package topics

import (
	"bytes"
	"encoding"
	"encoding/json"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// referenceJSON is encoding/json with Marshal's settings: what every fast
// encoder must equal, errors included.
func referenceJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// fastTypes are the types Marshal encodes without reflection.
var fastTypes = []reflect.Type{
	reflect.TypeFor[Wake](), reflect.TypeFor[WakePart](), reflect.TypeFor[Trigger](), reflect.TypeFor[TriggerInput](),
	reflect.TypeFor[AgentTreeSnapshot](), reflect.TypeFor[Scope](), reflect.TypeFor[NodeDigest](),
	reflect.TypeFor[Summary](), reflect.TypeFor[StatusCounts](), reflect.TypeFor[TruncationMeta](),
	reflect.TypeFor[Time](),
}

// TestWakeTypesAreNotMarshalers guards the reference: were one of these
// types a json.Marshaler (or TextMarshaler) calling Marshal, encoding/json
// would encode it with the fast path, every comparison here would hold
// trivially, and Marshal could recurse forever. Time's own MarshalJSON is
// the one exception, and it does not call Marshal.
func TestWakeTypesAreNotMarshalers(t *testing.T) {
	marshaler := reflect.TypeFor[json.Marshaler]()
	text := reflect.TypeFor[encoding.TextMarshaler]()
	for _, typ := range fastTypes {
		for _, tt := range []reflect.Type{typ, reflect.PointerTo(typ)} {
			if tt.Implements(marshaler) != (typ == timeType) || tt.Implements(text) {
				t.Errorf("%v: json.Marshaler %v, encoding.TextMarshaler %v; the fast encoders assume neither (but Time's MarshalJSON)",
					tt, tt.Implements(marshaler), tt.Implements(text))
			}
		}
	}
}

// sameAsReference fails unless Marshal encodes v (a value or a pointer of
// one of fastTypes) to encoding/json's bytes, or fails with its error, and
// took the fast path to do so.
func sameAsReference(t *testing.T, v any) {
	t.Helper()
	want, werr := referenceJSON(v)
	got, gerr := Marshal(v)
	if (werr == nil) != (gerr == nil) || werr != nil && werr.Error() != gerr.Error() {
		t.Fatalf("%T: Marshal error %v, encoding/json error %v", v, gerr, werr)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%T: Marshal differs from encoding/json:\n got  %q\n want %q", v, got, want)
	}
	// Not by falling back: the fast path fails exactly where encoding/json does.
	if _, ok := marshalFast(v); ok != (werr == nil) {
		t.Fatalf("%T: fast path ok=%v, encoding/json error %v", v, ok, werr)
	}
	prefix := []byte("pre")
	var app []byte
	var aerr error
	switch x := v.(type) {
	case *Wake:
		app, aerr = x.AppendJSON(prefix)
	case *AgentTreeSnapshot:
		app, aerr = x.AppendJSON(prefix)
	case *NodeDigest:
		app, aerr = x.AppendJSON(prefix)
	case *Trigger:
		app, aerr = x.AppendJSON(prefix)
	default:
		return
	}
	if (werr == nil) != (aerr == nil) || werr != nil && werr.Error() != aerr.Error() {
		t.Fatalf("%T: AppendJSON error %v, encoding/json error %v", v, aerr, werr)
	}
	if werr == nil && !bytes.Equal(app, append([]byte("pre"), want...)) || werr != nil && string(app) != "pre" {
		t.Fatalf("%T: AppendJSON gives %q, want %q", v, app, want)
	}
	if s, ok := v.(*AgentTreeSnapshot); ok {
		sameSplicedAsReference(t, s, want, werr)
	}
}

// sameSplicedAsReference fails unless AppendSnapshotJSON gives s's
// encoding, want (or encoding/json's error werr), both encoding the nodes
// itself and splicing in their encodings made apart.
func sameSplicedAsReference(t *testing.T, s *AgentTreeSnapshot, want []byte, werr error) {
	t.Helper()
	app, aerr := AppendSnapshotJSON([]byte("pre"), s, nil)
	if (werr == nil) != (aerr == nil) || werr != nil && werr.Error() != aerr.Error() {
		t.Fatalf("AppendSnapshotJSON error %v, encoding/json error %v", aerr, werr)
	}
	if werr == nil && !bytes.Equal(app, append([]byte("pre"), want...)) || werr != nil && string(app) != "pre" {
		t.Fatalf("AppendSnapshotJSON gives %q, want %q", app, want)
	}
	if werr != nil || s == nil {
		return // a node that does not encode has no encoding to splice
	}
	calls := 0
	app, aerr = AppendSnapshotJSON([]byte("pre"), s, func(dst []byte, i int) []byte {
		calls++
		enc, err := s.Nodes[i].AppendJSON(nil)
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		return append(dst, enc...)
	})
	if aerr != nil || !bytes.Equal(app, append([]byte("pre"), want...)) || calls != len(s.Nodes) {
		t.Fatalf("AppendSnapshotJSON splicing %d of %d nodes gives %q, %v; want %q", calls, len(s.Nodes), app, aerr, want)
	}
}

// checkAll compares the encoders on w, on each of its parts and on their
// pointers, nil pointers included.
func checkAll(t *testing.T, w *Wake) {
	t.Helper()
	s := &w.AgentTreeSnapshot
	sameAsReference(t, w)
	sameAsReference(t, *w)
	sameAsReference(t, (*Wake)(nil))
	sameAsReference(t, s)
	sameAsReference(t, *s)
	sameAsReference(t, (*AgentTreeSnapshot)(nil))
	if w.Part != nil {
		sameAsReference(t, w.Part)
		sameAsReference(t, *w.Part)
	}
	sameAsReference(t, (*WakePart)(nil))
	for i := range w.Triggers {
		sameAsReference(t, &w.Triggers[i])
		sameAsReference(t, w.Triggers[i])
		if in := w.Triggers[i].Input; in != nil {
			sameAsReference(t, in)
			sameAsReference(t, *in)
		}
		sameAsReference(t, w.Triggers[i].At)
		sameAsReference(t, &w.Triggers[i].At)
	}
	for i := range s.Nodes {
		sameAsReference(t, &s.Nodes[i])
		sameAsReference(t, s.Nodes[i])
	}
	sameAsReference(t, (*NodeDigest)(nil))
	sameAsReference(t, (*Trigger)(nil))
	sameAsReference(t, (*TriggerInput)(nil))
	sameAsReference(t, &s.Scope)
	sameAsReference(t, s.Scope)
	sameAsReference(t, (*Scope)(nil))
	sameAsReference(t, &s.Summary)
	sameAsReference(t, s.Summary)
	sameAsReference(t, (*Summary)(nil))
	sameAsReference(t, &s.Summary.CountsByStatus)
	sameAsReference(t, s.Summary.CountsByStatus)
	sameAsReference(t, (*StatusCounts)(nil))
	sameAsReference(t, &s.TruncationMeta)
	sameAsReference(t, s.TruncationMeta)
	sameAsReference(t, (*TruncationMeta)(nil))
	sameAsReference(t, s.GeneratedAt)
	sameAsReference(t, (*Time)(nil))
}

// tricky are strings at every edge of JSON string encoding.
var tricky = []string{
	"", "a", "agent-00042", `"`, `\`, `\"`, "/", "<script>&amp;</script>", "\x00", "\x01\x1f", "\b\f\n\r\t", "\x7f",
	"é", "漢字", "🙂", "e\u0301", "\u2028", "\u2029", "a\u2028b\u2029c", "\u2027\u202a", "\xe2\x80", "\xe2\x80\xa8\xe2",
	"\xff", "\xfe\xff", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xef\xbf\xbd", "a\xffb\xc3", "\xc3",
	strings.Repeat("x", 300), strings.Repeat("\u00e9\x00", 50),
}

// filler sets every exported field of a value, recursively, from fuzzed
// strings and ints and a stream of choices: which string, nil or not, how
// long a slice, which kind of time. It walks the types by reflection, so a
// field added to any of them is filled, and compared, without a change here.
type filler struct {
	strs    []string
	ints    []int64
	choices []byte
	rng     *rand.Rand
	// full sets every pointer and slice non-nil and non-empty.
	full bool
}

func newFiller(strs []string, ints []int64, choices []byte) *filler {
	h := fnv.New64a()
	for _, s := range strs {
		h.Write([]byte(s))
	}
	for _, n := range ints {
		h.Write([]byte{byte(n), byte(n >> 8), byte(n >> 16), byte(n >> 24)})
	}
	h.Write(choices)
	return &filler{strs: strs, ints: ints, choices: choices, rng: rand.New(rand.NewPCG(h.Sum64(), 1))}
}

// next is the next choice: from the fuzz input while it lasts, then from a
// generator seeded by it.
func (f *filler) next() int {
	if len(f.choices) > 0 {
		c := f.choices[0]
		f.choices = f.choices[1:]
		return int(c)
	}
	return int(f.rng.Uint32() & 0xff)
}

func (f *filler) string() string {
	pool := len(f.strs) + len(tricky)
	pickOne := func() string {
		if i := f.next() % pool; i < len(f.strs) {
			return f.strs[i]
		} else {
			return tricky[i-len(f.strs)]
		}
	}
	switch s := pickOne(); f.next() % 8 {
	case 0: // a piece cut at any byte, splitting characters
		if len(s) == 0 {
			return s
		}
		i := f.next() % len(s)
		return s[i : i+f.next()%(len(s)-i+1)]
	case 1:
		return s + pickOne()
	default:
		return s
	}
}

func (f *filler) int() int64 {
	switch c := f.next() % 8; c {
	case 0, 1:
		return f.ints[f.next()%len(f.ints)]
	case 2:
		return -f.ints[f.next()%len(f.ints)]
	case 3:
		return []int64{0, 1, -1, 9, 10, 99, 100, math.MaxInt64, math.MinInt64, math.MaxInt32, math.MinInt32}[f.next()%11]
	default:
		return int64(f.next()) - 100
	}
}

var fillerZones = []*time.Location{time.UTC, time.FixedZone("east", 5*3600+1800), time.FixedZone("west", -12*3600), time.FixedZone("odd", -37)}

func (f *filler) time() Time {
	n := f.ints[f.next()%len(f.ints)]
	switch f.next() % 8 {
	case 0:
		return Time{}
	case 1:
		return NewTime(time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC))
	case 2: // any instant, from any zone and nanoseconds, years beyond 0000-9999 too
		return NewTime(time.Unix(n, int64(f.next())*3_999_999).In(fillerZones[f.next()%len(fillerZones)]))
	case 3:
		return NewTime(time.Unix(0, n).In(fillerZones[f.next()%len(fillerZones)]))
	case 4: // around year 0 and 9999
		y := []int{-1, 0, 1, 999, 1000, 9999, 10000}[f.next()%7]
		return NewTime(time.Date(y, time.Month(1+f.next()%12), 1+f.next()%31, f.next()%24, f.next()%60, f.next()%60, f.next()*3_921_569, time.UTC))
	default:
		return UnixMilliTime(n % (253402300800000)) // within 9999, both signs
	}
}

func (f *filler) fill(v reflect.Value) {
	if v.Type() == timeType {
		v.Set(reflect.ValueOf(f.time()))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(f.string())
	case reflect.Int, reflect.Int64:
		v.SetInt(f.int())
	case reflect.Bool:
		v.SetBool(f.next()%2 == 1)
	case reflect.Pointer:
		if !f.full && f.next()%3 == 0 {
			v.SetZero()
			return
		}
		p := reflect.New(v.Type().Elem())
		f.fill(p.Elem())
		v.Set(p)
	case reflect.Slice:
		n := f.next() % 5
		if f.full {
			n = 2 + n%2
		}
		switch n {
		case 0:
			v.SetZero() // nil: null
		case 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0)) // empty: []
		default:
			s := reflect.MakeSlice(v.Type(), n-1, n-1)
			for i := range n - 1 {
				f.fill(s.Index(i))
			}
			v.Set(s)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				f.fill(v.Field(i))
			}
		}
	default:
		// A kind the fast encoders do not write (a float, a map, an
		// interface): write its encoder in wakejson.go, then fill it here.
		panic("filler: no fast encoder for a field of kind " + v.Kind().String() + " (" + v.Type().String() + ")")
	}
}

func (f *filler) wake() *Wake {
	var w Wake
	f.fill(reflect.ValueOf(&w).Elem())
	return &w
}

// TestAppendJSONCoversEveryField compares the encoders on many generated
// wakes, some with every pointer and slice set, so that every field of every
// type is written at least once and a field the fast encoders miss fails.
func TestAppendJSONCoversEveryField(t *testing.T) {
	ints := []int64{0, 1, -1, 1771065600000, -62135596800000, 253402300799999, math.MaxInt64, math.MinInt64}
	for i := range 300 {
		f := newFiller([]string{"run-1", "<&>"}, ints, []byte{byte(i), byte(i >> 8)})
		f.full = i%3 == 0
		checkAll(t, f.wake())
	}
}

// TestAppendJSONEdges pins the cases that matter one by one.
func TestAppendJSONEdges(t *testing.T) {
	for _, s := range tricky {
		d := NodeDigest{AgentID: s, Role: Role(s), ParentAgentID: &s, RecentRequestDedupeKeys: []string{s, s}}
		sameAsReference(t, &d)
	}
	// nil and empty slices, nil and set pointers
	sameAsReference(t, &AgentTreeSnapshot{})
	sameAsReference(t, &AgentTreeSnapshot{Nodes: []NodeDigest{}, Summary: Summary{ActiveCorrelationHandles: []string{}}})
	sameAsReference(t, &Wake{})
	sameAsReference(t, &Wake{Triggers: []Trigger{}})
	sameAsReference(t, &Wake{Part: &WakePart{}, Triggers: []Trigger{}})
	sameAsReference(t, &Wake{Part: &WakePart{Number: math.MaxInt, Count: math.MinInt}})
	sameAsReference(t, &Wake{Triggers: []Trigger{{Input: &TriggerInput{}}, {Input: &TriggerInput{Text: "t", ContentRef: "c"}}}})
	rem := int64(math.MinInt64)
	sameAsReference(t, &NodeDigest{LeaseRemainingMs: &rem, OpenRequestCount: math.MaxInt})
	// Times: the zero Time, the extremes, a zone and nanoseconds (truncated), and
	// years encoding/json refuses (the error must be its own).
	for _, tm := range []Time{{}, UnixMilliTime(0), UnixMilliTime(-1), UnixMilliTime(253402300799999),
		NewTime(time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)), NewTime(time.Date(2026, 2, 14, 10, 40, 0, 999_999_999, fillerZones[1])),
		NewTime(time.Date(-1, 12, 31, 23, 59, 59, 0, time.UTC)), NewTime(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))} {
		tm := tm
		sameAsReference(t, &Wake{Triggers: []Trigger{{At: tm}}})
		sameAsReference(t, &AgentTreeSnapshot{GeneratedAt: tm})
		sameAsReference(t, &NodeDigest{LastSignalAt: &tm})
		sameAsReference(t, tm)
	}
}

// FuzzAppendJSON builds wakes from fuzzed strings (any bytes: invalid UTF-8,
// control characters, '<', '>', '&', U+2028), fuzzed ints (any int64) and
// fuzzed choices (nil or empty slices and pointers, times in any zone and
// year), and requires every fast encoder to give encoding/json's bytes, or
// its error.
func FuzzAppendJSON(f *testing.F) {
	f.Add("agent-00042", "<a href=\"x\">&amp;</a>", int64(1771065600000), int64(-1), []byte{})
	f.Add("\u2028\u2029", "\xff\xfe\x00\x1f\x7f", int64(math.MaxInt64), int64(math.MinInt64), []byte{1, 2, 3, 4, 5, 6, 7, 8})
	f.Add("\xe2\x80", "é漢🙂\\\"\n", int64(253402300800000), int64(-62135596800001), []byte{0, 0, 0, 0})
	f.Add("", "", int64(0), int64(0), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, a, b string, n, m int64, choices []byte) {
		checkAll(t, newFiller([]string{a, b}, []int64{n, m}, choices).wake())
	})
}
