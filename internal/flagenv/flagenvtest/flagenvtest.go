// Package flagenvtest checks a command's flags against flagenv's rule, for
// the tests of canopy's binaries.
package flagenvtest

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/canopy-dev/canopy/internal/flagenv"
)

// candidates are values tried, in order, for a flag's variable: the first
// its Value accepts and that changes it from its default is used. The
// last two are rules of pkg/redact's flags: a data field, and a pattern.
var candidates = []string{"7", "3s", "4s", "1.5", "3MiB", "x-flagenv-test", "127.0.0.1:7", "label", "flagenv_test=x-flagenv-test"}

// EveryFlag checks that every flag of a command has its CANOPY_* variable
// and that setting the variable alone changes the parsed value. parse runs
// the command on no arguments, in the current environment, and returns
// its flag set as parsed (flags and variables applied). Aliases
// (flagenv.Alias) are skipped: they have no variable.
func EveryFlag(t *testing.T, parse func() *flag.FlagSet) {
	t.Helper()
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, flagenv.Prefix) {
			t.Setenv(name, "")
			os.Unsetenv(name)
		}
	}
	base := parse()
	if base == nil {
		t.Fatal("the command did not parse its flags")
	}
	n := 0
	base.VisitAll(func(f *flag.Flag) {
		if strings.HasPrefix(f.Usage, "deprecated: use -") {
			return
		}
		n++
		v, want, ok := changed(f)
		if !ok {
			t.Errorf("-%s: no test value changes it from %q", f.Name, f.DefValue)
			return
		}
		name := flagenv.Var(f.Name)
		if !strings.Contains(f.Usage, name) {
			t.Errorf("-%s: its usage does not name %s", f.Name, name)
		}
		t.Setenv(name, v)
		got := parse()
		os.Unsetenv(name)
		if got == nil {
			t.Errorf("%s=%s: the command refused it", name, v)
			return
		}
		if g := got.Lookup(f.Name).Value.String(); g != want {
			t.Errorf("%s=%s: -%s is %q, want %q", name, v, f.Name, g, want)
		}
	})
	if n == 0 {
		t.Fatal("no flags")
	}
}

// changed finds a value that f's Value accepts and that differs from its
// default, and what f reads back after it; it leaves f at its default.
func changed(f *flag.Flag) (v, want string, ok bool) {
	defer f.Value.Set(f.DefValue)
	if b, isBool := f.Value.(interface{ IsBoolFlag() bool }); isBool && b.IsBoolFlag() {
		v = "true"
		if f.DefValue == "true" {
			v = "false"
		}
		return v, v, true
	}
	for _, c := range candidates {
		if f.Value.Set(c) == nil && f.Value.String() != f.DefValue {
			return c, f.Value.String(), true
		}
	}
	return "", "", false
}
