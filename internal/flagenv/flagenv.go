// Package flagenv gives every flag of a canopy command an environment
// variable by one rule, peterbourgon/ff's: the flag -foo-bar is read from
// CANOPY_FOO_BAR (the name upper-cased, '-', '.' and '/' turned into '_').
// Variables apply after the command line is parsed, only to flags it did
// not set, through the flag's own Set: a variable is parsed, and refused,
// exactly as the flag would be, and the error names the variable. Values
// never become flag defaults, so -h prints no value from the environment
// (a password included).
//
// It is a short function over flag.FlagSet rather than ff itself so that
// the commands keep the standard library's flag package and its help
// output, and canopy needs the deprecated aliases (Alias, EnvAlias) that
// renamed flags and variables keep for a release.
package flagenv

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
)

// Prefix starts every variable's name.
const Prefix = "CANOPY_"

// Var is the environment variable of the flag name: CANOPY_FOO_BAR for
// foo-bar.
func Var(name string) string {
	return Prefix + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_", "/", "_").Replace(name))
}

// EnvAlias is an old variable name still read, deprecated, for the flag
// Flag when the flag's own variable is not set.
type EnvAlias struct {
	Var, Flag string
}

// Parse parses args into fs and then sets every flag the command line did
// not set from its variable (Apply). Before parsing it adds the variable's
// name to each flag's usage, so that -h lists them. Like fs.Parse it
// reports an error on fs.Output() too, prefixed with fs.Name(), so a
// command only has to exit. It returns the deprecated variables that were
// used (EnvAlias), for the command to warn about.
func Parse(fs *flag.FlagSet, args []string, aliases ...EnvAlias) (deprecated []string, err error) {
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := f.Value.(*aliasValue); !ok && !strings.Contains(f.Usage, Var(f.Name)) {
			f.Usage += " (" + Var(f.Name) + ")"
		}
	})
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	deprecated, err = Apply(fs, aliases...)
	if err != nil {
		fmt.Fprintf(fs.Output(), "%s: %v\n", fs.Name(), err)
	}
	return deprecated, err
}

// Apply sets every flag of fs not set on the command line from its
// variable, through the flag's Set; a flag that is not set either way keeps
// its default. Then, for a flag still unset, it reads the deprecated names
// in aliases. Two flags with one variable are an error, as is a variable
// that does not parse; the error names the variable and the flag, not the
// value (it may be a secret).
func Apply(fs *flag.FlagSet, aliases ...EnvAlias) (deprecated []string, err error) {
	if err := check(fs, aliases); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) {
		set[f.Name] = true
		if a, ok := f.Value.(*aliasValue); ok {
			set[a.canonical] = true
		}
	})
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := f.Value.(*aliasValue); ok || set[f.Name] {
			return
		}
		if v, ok := os.LookupEnv(Var(f.Name)); ok {
			set[f.Name] = true
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s (-%s): %w", Var(f.Name), f.Name, err))
			}
		}
	})
	for _, a := range aliases {
		if v, ok := os.LookupEnv(a.Var); ok && !set[a.Flag] {
			deprecated = append(deprecated, a.Var)
			set[a.Flag] = true
			if err := fs.Set(a.Flag, v); err != nil {
				errs = append(errs, fmt.Errorf("%s (-%s): %w", a.Var, a.Flag, err))
			}
		}
	}
	return deprecated, errors.Join(errs...)
}

// check refuses two flags mapping to one variable, and an alias naming a
// flag fs lacks or a variable a flag has.
func check(fs *flag.FlagSet, aliases []EnvAlias) error {
	owner := map[string]string{}
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := f.Value.(*aliasValue); ok {
			return
		}
		v := Var(f.Name)
		if o, ok := owner[v]; ok {
			errs = append(errs, fmt.Errorf("flags -%s and -%s would both read %s", o, f.Name, v))
		}
		owner[v] = f.Name
	})
	for _, a := range aliases {
		if fs.Lookup(a.Flag) == nil {
			errs = append(errs, fmt.Errorf("variable %s: no flag -%s", a.Var, a.Flag))
		}
		if o, ok := owner[a.Var]; ok {
			errs = append(errs, fmt.Errorf("variable %s is -%s's, not an alias of -%s", a.Var, o, a.Flag))
		}
	}
	return errors.Join(errs...)
}

// Vars lists the variables fs reads: every flag's, and the aliases.
func Vars(fs *flag.FlagSet, aliases ...EnvAlias) []string {
	var out []string
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := f.Value.(*aliasValue); !ok {
			out = append(out, Var(f.Name))
		}
	})
	for _, a := range aliases {
		out = append(out, a.Var)
	}
	slices.Sort(out)
	return out
}

// Unknown lists the CANOPY_* variables of the environment that fs does
// not read: misspelt, or meant for another command. A command checking its
// configuration (-check-config) refuses them, since otherwise they would
// be silently ignored.
func Unknown(fs *flag.FlagSet, aliases ...EnvAlias) []string {
	known := Vars(fs, aliases...)
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, Prefix) {
			if _, found := slices.BinarySearch(known, name); !found {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Alias registers old as a deprecated name of the flag canonical, already
// registered: both set the same value. An alias has no variable of its own.
func Alias(fs *flag.FlagSet, old, canonical string) {
	f := fs.Lookup(canonical)
	if f == nil {
		panic("flagenv.Alias: no flag -" + canonical)
	}
	fs.Var(&aliasValue{Value: f.Value, canonical: canonical}, old, "deprecated: use -"+canonical)
}

// aliasValue is a flag's value under an old name.
type aliasValue struct {
	flag.Value
	canonical string
}

// String is the flag's value. The flag package also calls it on a zero
// aliasValue, to tell whether a default is worth printing in -h.
func (a *aliasValue) String() string {
	if a == nil || a.Value == nil {
		return ""
	}
	return a.Value.String()
}

// IsBoolFlag lets a boolean alias stand without a value, as its flag does.
func (a *aliasValue) IsBoolFlag() bool {
	b, ok := a.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}
