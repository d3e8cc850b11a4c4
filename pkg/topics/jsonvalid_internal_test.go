package topics

import (
	"bytes"
	"encoding/json"
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
