package main

import "testing"

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1048576": 1 << 20, "512MiB": 512 << 20, "512Mi": 512 << 20, "2GiB": 2 << 30, "1Gi": 1 << 30, "64KiB": 64 << 10, "100B": 100, "1TiB": 1 << 40} {
		if got, err := parseByteSize(in); err != nil || got != want {
			t.Errorf("parseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "512MB", "1.5GiB", "-1", "9999999TiB", "12kib"} {
		if got, err := parseByteSize(in); err == nil {
			t.Errorf("parseByteSize(%q) = %d, want an error", in, got)
		}
	}
}
