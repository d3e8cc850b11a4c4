package main

import (
	"bytes"
	"context"
	"flag"
	"testing"

	"github.com/canopy-dev/canopy/internal/flagenv/flagenvtest"
)

// TestEveryFlagHasItsVariable: every flag -foo-bar is read from
// CANOPY_FOO_BAR, and setting that alone changes its value.
func TestEveryFlagHasItsVariable(t *testing.T) {
	flagenvtest.EveryFlag(t, func() *flag.FlagSet {
		var fs *flag.FlagSet
		flagsParsed = func(f *flag.FlagSet) { fs = f }
		defer func() { flagsParsed = nil }()
		var out bytes.Buffer
		if code := run(context.Background(), nil, &out, nil); code != 0 {
			t.Logf("exit %d: %s", code, out.String())
			return nil
		}
		return fs
	})
}
