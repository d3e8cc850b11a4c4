package flagenv

import (
	"bytes"
	"flag"
	"slices"
	"strings"
	"testing"
	"time"
)

func newSet() (*flag.FlagSet, *string, *bool, *int, *time.Duration) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(new(bytes.Buffer))
	s := fs.String("foo-bar", "def", "a string")
	b := fs.Bool("standby", true, "a bool")
	n := fs.Int("max.batch", 5, "an int")
	d := fs.Duration("a/b", time.Second, "a duration")
	return fs, s, b, n, d
}

func TestVar(t *testing.T) {
	for name, want := range map[string]string{"foo-bar": "CANOPY_FOO_BAR", "max.batch": "CANOPY_MAX_BATCH", "a/b": "CANOPY_A_B", "x": "CANOPY_X"} {
		if got := Var(name); got != want {
			t.Errorf("Var(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestEnvAppliesToUnsetFlags: a variable sets a flag the command line left
// alone, through the flag's parser (booleans by strconv.ParseBool); the
// command line wins.
func TestEnvAppliesToUnsetFlags(t *testing.T) {
	fs, s, b, n, d := newSet()
	t.Setenv("CANOPY_FOO_BAR", "env")
	t.Setenv("CANOPY_STANDBY", "0")
	t.Setenv("CANOPY_MAX_BATCH", "7")
	t.Setenv("CANOPY_A_B", "3s")
	if _, err := Parse(fs, []string{"-max.batch", "9"}); err != nil {
		t.Fatal(err)
	}
	if *s != "env" || *b || *n != 9 || *d != 3*time.Second {
		t.Errorf("got %q %v %d %v, want env false 9 3s", *s, *b, *n, *d)
	}
}

// TestBadValueNamesVariable: a variable that does not parse is an error
// naming it and its flag, not the value.
func TestBadValueNamesVariable(t *testing.T) {
	fs, _, _, _, _ := newSet()
	t.Setenv("CANOPY_STANDBY", "yes-please")
	t.Setenv("CANOPY_MAX_BATCH", "many")
	_, err := Parse(fs, nil)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"CANOPY_STANDBY (-standby)", "CANOPY_MAX_BATCH (-max.batch)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "yes-please") {
		t.Errorf("error %q carries the value", err)
	}
}

// TestHelpPrintsNoValue: -h lists each flag's variable and its default, not
// the variable's value.
func TestHelpPrintsNoValue(t *testing.T) {
	fs, _, _, _, _ := newSet()
	var out bytes.Buffer
	fs.SetOutput(&out)
	t.Setenv("CANOPY_FOO_BAR", "canary")
	if _, err := Parse(fs, []string{"-h"}); err != flag.ErrHelp {
		t.Fatalf("Parse -h: %v", err)
	}
	if strings.Contains(out.String(), "canary") || !strings.Contains(out.String(), "(CANOPY_FOO_BAR)") {
		t.Errorf("help:\n%s", out.String())
	}
}

// TestDuplicateRefused: two flags reading one variable are an error.
func TestDuplicateRefused(t *testing.T) {
	fs, _, _, _, _ := newSet()
	fs.String("foo.bar", "", "")
	if _, err := Parse(fs, nil); err == nil || !strings.Contains(err.Error(), "CANOPY_FOO_BAR") {
		t.Fatalf("Parse: %v, want the duplicate refused", err)
	}
	fs, _, _, _, _ = newSet()
	if _, err := Parse(fs, nil, EnvAlias{Var: "CANOPY_STANDBY", Flag: "foo-bar"}); err == nil {
		t.Fatal("an alias taking a flag's variable was accepted")
	}
}

// TestAliases: an old flag name sets the flag (booleans without a value),
// has no variable, and a deprecated variable applies only when neither
// the command line nor the flag's own variable set it.
func TestAliases(t *testing.T) {
	fs, s, b, _, _ := newSet()
	Alias(fs, "old-foo", "foo-bar")
	Alias(fs, "old-standby", "standby")
	t.Setenv("CANOPY_OLD_FOO", "ignored")
	t.Setenv("CANOPY_LEGACY_STANDBY", "false")
	dep, err := Parse(fs, []string{"-old-foo", "cli"}, EnvAlias{Var: "CANOPY_LEGACY_STANDBY", Flag: "standby"})
	if err != nil {
		t.Fatal(err)
	}
	if *s != "cli" || *b || !slices.Equal(dep, []string{"CANOPY_LEGACY_STANDBY"}) {
		t.Errorf("got %q %v %v", *s, *b, dep)
	}
	fs, _, b, _, _ = newSet()
	Alias(fs, "old-standby", "standby")
	t.Setenv("CANOPY_STANDBY", "true")
	if dep, err := Parse(fs, []string{"-old-standby=false"}, EnvAlias{Var: "CANOPY_LEGACY_STANDBY", Flag: "standby"}); err != nil || *b || dep != nil {
		t.Errorf("alias on the command line: %v %v %v, want false and no variable read", *b, dep, err)
	}
	if u := Unknown(fs, EnvAlias{Var: "CANOPY_LEGACY_STANDBY", Flag: "standby"}); !slices.Contains(u, "CANOPY_OLD_FOO") ||
		slices.Contains(u, "CANOPY_LEGACY_STANDBY") || slices.Contains(u, "CANOPY_STANDBY") {
		t.Errorf("Unknown = %v, want the alias flag's would-be variable", u)
	}
}

// TestHelpWithAliases: -h describes an alias as deprecated and prints
// every flag; the flag package calls String on a zero alias to tell
// whether its default is worth printing, which must not panic.
func TestHelpWithAliases(t *testing.T) {
	fs, _, _, _, _ := newSet()
	Alias(fs, "old-foo", "foo-bar")
	var out bytes.Buffer
	fs.SetOutput(&out)
	if _, err := Parse(fs, []string{"-h"}); err != flag.ErrHelp {
		t.Fatalf("Parse -h: %v", err)
	}
	help := out.String()
	if strings.Contains(help, "panic") || !strings.Contains(help, "deprecated: use -foo-bar") || !strings.Contains(help, "-standby") {
		t.Errorf("help:\n%s", help)
	}
}
