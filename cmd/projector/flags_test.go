package main

import (
	"bytes"
	"flag"
	"strings"
	"testing"

	"github.com/canopy-dev/canopy/internal/flagenv/flagenvtest"
)

// parsed runs a subcommand only as far as its parsed flags.
func parsed(t *testing.T, sub string) func() *flag.FlagSet {
	return func() *flag.FlagSet {
		var fs *flag.FlagSet
		flagsParsed = func(f *flag.FlagSet) { fs = f }
		defer func() { flagsParsed = nil }()
		var out bytes.Buffer
		if code := run([]string{sub}, strings.NewReader(""), &out, &out); code != 0 {
			t.Logf("projector %s: exit %d: %s", sub, code, out.String())
			return nil
		}
		return fs
	}
}

// TestEveryFlagHasItsVariable: every flag -foo-bar of every subcommand is
// read from CANOPY_FOO_BAR, and setting that alone changes its value.
func TestEveryFlagHasItsVariable(t *testing.T) {
	for _, sub := range []string{"run", "create-topics", "replay"} {
		t.Run(sub, func(t *testing.T) { flagenvtest.EveryFlag(t, parsed(t, sub)) })
	}
}
