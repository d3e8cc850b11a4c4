package redact

import (
	"errors"
	"flag"
	"strings"
)

// RegisterFlags registers the operator's rules as flags of fs, the same
// in every canopy command that redacts: -redact-field and -redact-pattern,
// each repeatable and each adding to c. A value may hold several rules,
// one per line (and fields also separated by commas), so that one
// environment variable (CANOPY_REDACT_FIELD, CANOPY_REDACT_PATTERN) or
// Helm value carries them all; a rule that does not parse is refused when
// the flag is set, with what to fix.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Var(&fieldsValue{&c.Fields}, "redact-field",
		"a data `field` whose whole value is replaced by [redacted:field:<rule>] before anything is made of an event: field, or\n"+
			"type:field for one event type (label, tree.artifact_created:label); repeat the flag, or separate rules by commas or lines")
	fs.Var(&patternsValue{&c.Patterns}, "redact-pattern",
		"an operator's redaction `rule` name=regexp (Go RE2): its matches in the events' free text become [redacted:<name>], after\n"+
			"the built-in rules (docs/CONTRACT.md \"Redaction\"); repeat the flag, or give one rule per line")
}

// fieldsValue is -redact-field.
type fieldsValue struct{ rules *[]FieldRule }

func (v *fieldsValue) String() string {
	if v == nil || v.rules == nil {
		return ""
	}
	s := make([]string, len(*v.rules))
	for i, r := range *v.rules {
		s[i] = r.String()
	}
	return strings.Join(s, ",")
}

// Set adds the rules of s, all of them or, when one is wrong, none.
func (v *fieldsValue) Set(s string) error {
	var add []FieldRule
	var errs []error
	for _, spec := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' }) {
		if spec = strings.TrimSpace(spec); spec == "" {
			continue
		}
		r, err := ParseFieldRule(spec)
		errs = append(errs, err)
		add = append(add, r)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	*v.rules = append(*v.rules, add...)
	return nil
}

// patternsValue is -redact-pattern.
type patternsValue struct{ rules *[]PatternRule }

func (v *patternsValue) String() string {
	if v == nil || v.rules == nil {
		return ""
	}
	s := make([]string, len(*v.rules))
	for i, r := range *v.rules {
		s[i] = r.String()
	}
	return strings.Join(s, "\n")
}

// Set adds the rules of s, one per line, all of them or, when one is
// wrong, none.
func (v *patternsValue) Set(s string) error {
	var add []PatternRule
	var errs []error
	for _, spec := range strings.Split(s, "\n") {
		if strings.TrimSpace(spec) == "" {
			continue
		}
		r, err := ParsePatternRule(strings.TrimRight(spec, "\r"))
		errs = append(errs, err)
		add = append(add, r)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	*v.rules = append(*v.rules, add...)
	return nil
}
