package topics

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
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
