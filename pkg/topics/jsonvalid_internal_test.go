package topics

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// validJSONCases are inputs at each edge of the grammar.
var validJSONCases = []string{
	``, ` `, `{}`, `[]`, `""`, `0`, `-0`, `01`, `-`, `1.`, `.1`, `1.5e`, `1e+`, `1E-7`, `-12.5e+3`, `2e308`,
	`true`, `tru`, `truex`, `nul`, `null `, ` false`, `True`,
	`{"a":1}`, `{"a":1,}`, `{"a" 1}`, `{a:1}`, `{"a":1 "b":2}`, `{"a":{"b":[1,2,{"c":null}]}}`, `[1,]`, `[,1]`, `[1 2]`,
	`"\u00e9"`, `"\u00g9"`, `"\x"`, `"\/\b\f\n\r\t\"\\"`, "\"\x01\"", "\"\x7f\"", "\"\xff\xfe\"", `"unterminated`, `"a\`,
	"\t{ \"a\" :\n[ 1 ,\r2 ] }\n", `{}{}`, `{} x`, `[[[[]]]]`,
	// Strings long enough to be scanned eight bytes at a time.
	`"abcdefghijklmnopqrstuvwxyz"`, `"abcdefgh\"ijklmnop"`, `"abcdefghijklmnop\u00e9qrstuvw"`, "\"abcdefghij\x01klmnop\"",
	"\"abcdefgh\x1fijklmnop\"", "\"abcdéfghíjklmnöp\xff\"", `"abcdefghijklmnop`, `"abcdefghijklmno\`, `"abcdefgh\x12345678"`,
	`{"abcdefghijklmnop":"qrstuvwxyz012345"}`,
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	strings.Repeat(`{"a":`, 10000) + `1` + strings.Repeat("}", 10000),
	strings.Repeat(`{"a":`, 10001) + `1` + strings.Repeat("}", 10001),
}

func TestValidJSONAgreesWithEncodingJSON(t *testing.T) {
	cases := validJSONCases
	// And every line of the examples, which are what producers send.
	files, _ := filepath.Glob("../../examples/*.jsonl")
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for line := range bytes.Lines(raw) {
			cases = append(cases, string(line))
		}
	}
	if len(cases) < 1000 {
		t.Fatalf("only %d cases: the examples are missing", len(cases))
	}
	for _, c := range cases {
		if got, want := validJSON([]byte(c)), json.Valid([]byte(c)); got != want {
			t.Errorf("validJSON(%.80q) = %v, json.Valid says %v", c, got, want)
		}
	}
}

func FuzzValidJSON(f *testing.F) {
	for _, c := range validJSONCases {
		if len(c) < 1000 {
			f.Add([]byte(c))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid says %v", b, got, want)
		}
	})
}

// TestPlain8 holds the eight-byte test to the byte-by-byte one: every byte
// value at every position among plain ones, and random words.
func TestPlain8(t *testing.T) {
	plain := func(c byte) bool { return c != '"' && c != '\\' && c >= 0x20 }
	check := func(b [8]byte) {
		want := true
		for _, c := range b {
			want = want && plain(c)
		}
		if got := plain8(binary.LittleEndian.Uint64(b[:])); got != want {
			t.Fatalf("plain8(%q) = %v, want %v", b, got, want)
		}
	}
	for pos := range 8 {
		for c := range 256 {
			for _, fill := range []byte{'a', 0x20, 0x21, 0x23, 0x5b, 0x5d, 0x7f, 0x80, 0xff} {
				var b [8]byte
				for i := range b {
					b[i] = fill
				}
				b[pos] = byte(c)
				check(b)
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1 << 20 {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], rng.Uint64())
		check(b)
	}
}

// TestSplitData holds the data members an event's pass splits to what
// splitting the data member's own text gives, whatever the data member
// is: repeated, not an object, escaped, nested, absent.
func TestSplitData(t *testing.T) {
	for _, in := range []string{
		`{"data":{"a":1,"b":"x"}}`,
		`{"data":{}}`,
		` { "id" : "e" , "data" : { "a" : { "b" : { "c" : 1 } } , "d" : [ {"e":2} ] } } `,
		`{"data":{"a":1},"data":{"b":2}}`,
		`{"data":{"a":1},"data":"x"}`,
		`{"data":"x","data":{"a":1}}`,
		`{"data":null}`,
		`{"data":[{"a":1}]}`,
		`{"d\u0061ta":{"a":1}}`,
		`{"x":{"data":{"a":1}},"data":{"b":2}}`,
		`{"a":{"b":1},"data":{"c":{"d":2},"e":3},"f":{"g":4}}`,
		`{"id":"e"}`,
		`{"data":{"a":1,"a":2}}`,
		`{"data":{"` + strings.Repeat("k", 40) + `":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17}}`,
	} {
		attrs, d, err := decodeEventObject([]byte(in))
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		raw, ok := attrs.get(attrData)
		got := d.of(raw)
		want, wantErr := decodeObjectTwoPass(raw)
		switch {
		case !ok || string(raw) == "null" || raw[0] != '{':
			if got != nil {
				t.Errorf("%s: split %v for data %s, which is no object", in, *got, raw)
			}
		case wantErr != nil:
			t.Fatalf("%s: data %s: %v", in, raw, wantErr)
		case got == nil:
			t.Errorf("%s: data %s not split", in, raw)
		case !slices.EqualFunc(*got, want, func(a, b member) bool { return a.name == b.name && string(a.raw) == string(b.raw) }):
			t.Errorf("%s: split %v, want %v", in, *got, want)
		}
		attrs.free()
		d.members.free()
	}
}

// TestAttrSlots holds attrSlots to members.get and knownAttr to the names
// the decoder knows, over members with names repeated and unknown.
func TestAttrSlots(t *testing.T) {
	known := []string{attrSpecVersion, attrID, attrSource, attrType, attrTime, attrDataContentType,
		attrDataSchema, attrSubject, attrRunID, attrAgentID, attrSchemaVersion, attrSessionID,
		attrThreadID, attrCorrelationID, attrCausationID, attrData, attrDataBase64}
	if len(known) != numAttrs {
		t.Fatalf("%d known attributes, numAttrs %d", len(known), numAttrs)
	}
	seen := map[int]bool{}
	for _, n := range known {
		k := attrSlot(n)
		if k < 0 || k >= numAttrs || seen[k] {
			t.Fatalf("attrSlot(%q) = %d: not a slot of its own", n, k)
		}
		seen[k] = true
	}
	names := append(slices.Clone(known), "extension", "Data", "ids", "")
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var ms members
		n := r.IntN(30)
		if r.IntN(20) == 0 {
			n = 250 + r.IntN(10) // past what attrSlots indexes
		}
		for i := range n {
			ms = append(ms, member{names[r.IntN(len(names))], json.RawMessage(strconv.Itoa(i))})
		}
		s := slotsOf(ms)
		if want := len(ms.names(func(n string) bool { return !knownAttr(n) })) > 0; s.unknown != want {
			t.Fatalf("%v: unknown %v, want %v", ms, s.unknown, want)
		}
		for _, n := range known {
			got, ok := s.get(ms, n)
			want, wantOK := ms.get(n)
			if ok != wantOK || string(got) != string(want) {
				t.Fatalf("%v: get %q = %s %v, want %s %v", ms, n, got, ok, want, wantOK)
			}
		}
	}
}
