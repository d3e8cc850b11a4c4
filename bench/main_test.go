package main

import (
	"io"
	"strings"
	"testing"
)

// TestParseArgsResultFile: the JSON result file is bench/results.json, or
// bench/results-kafka.json when the harness starts Apache Kafka itself; a
// Kafka given with -brokers is not the one -kafka names, and "-" writes
// none.
func TestParseArgsResultFile(t *testing.T) {
	for _, tc := range []struct {
		args string
		want string
	}{
		{"", "bench/results.json"},
		{"-kafka real", "bench/results-kafka.json"},
		{"-kafka real -brokers kafka:9092", "bench/results.json"},
		{"-brokers kafka:9092 -kafka real", "bench/results.json"},
		{"-kafka real -json -", ""},
		{"-json /tmp/r.json", "/tmp/r.json"},
	} {
		_, out, ok := parseArgs(strings.Fields(tc.args), io.Discard, io.Discard)
		if !ok || out.json != tc.want {
			t.Errorf("%q: result file %q (ok %v), want %q", tc.args, out.json, ok, tc.want)
		}
	}
	if _, _, ok := parseArgs([]string{"-instances", "x"}, io.Discard, io.Discard); ok {
		t.Error("-instances x: accepted")
	}
}

// TestParseArgsPin: -pin reaches the harness's Config, off by default.
func TestParseArgsPin(t *testing.T) {
	for args, want := range map[string]bool{"": false, "-pin": true, "-scenario max -pin": true} {
		c, _, ok := parseArgs(strings.Fields(args), io.Discard, io.Discard)
		if !ok || c.Pin != want {
			t.Errorf("%q: Pin %v (ok %v), want %v", args, c.Pin, ok, want)
		}
	}
}
