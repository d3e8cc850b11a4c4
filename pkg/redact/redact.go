package redact

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// ErrConfig is wrapped by the errors of a Config that cannot make a Policy.
var ErrConfig = errors.New("redact: invalid config")

// Config is the operator's part of a policy, added to the built-in rules.
// The zero Config is the built-in rules alone.
type Config struct {
	// Fields are field rules: data fields whose whole value is replaced.
	// Default none.
	Fields []FieldRule
	// Patterns are pattern rules, run after the built-in ones, in this
	// order, on the free-text fields. Default none.
	Patterns []PatternRule
}

// FieldRule replaces the whole value of a string field of an event's
// data: in one event type, or in every type that has the field.
type FieldRule struct {
	// Type is the event type; empty: every type with a string field of
	// that name.
	Type topics.EventType
	// Field is the field's JSON name in the event's data, e.g. "label".
	Field string
}

// String is the rule as ParseFieldRule reads it: "field" or "type:field".
func (r FieldRule) String() string {
	if r.Type == "" {
		return r.Field
	}
	return string(r.Type) + ":" + r.Field
}

// Name is the rule's name, as its marker and metric label carry it:
// "field:" and the rule.
func (r FieldRule) Name() string { return "field:" + r.String() }

// ParseFieldRule reads "field" or "type:field" (tree.artifact_created:label),
// and checks that the field is a string field of the type's data (of some
// type's, without one) that can hold a marker.
func ParseFieldRule(s string) (FieldRule, error) {
	s = strings.TrimSpace(s)
	var r FieldRule
	if typ, field, ok := strings.Cut(s, ":"); ok {
		r = FieldRule{Type: topics.EventType(typ), Field: field}
	} else {
		r = FieldRule{Field: s}
	}
	_, err := r.targets()
	return r, err
}

// targets are the event types whose data r rewrites: r.Type's, or every
// type with a string field of r's name that can hold the marker. A field
// the contract checks as an enumeration (an outcome, a state) holds no
// secret and cannot hold a marker: naming it with its type is an error,
// and a rule without a type leaves it alone.
func (r FieldRule) targets() ([]topics.EventType, error) {
	if r.Field == "" {
		return nil, fmt.Errorf("field rule %q: no field; want field or type:field, e.g. label or tree.artifact_created:label", r.String())
	}
	if r.Type != "" {
		if !r.Type.Known() {
			return nil, fmt.Errorf("field rule %q: unknown event type %q", r.String(), r.Type)
		}
		if _, ok := stringField(reflect.TypeOf(topics.NewPayload(r.Type)).Elem(), r.Field); !ok {
			return nil, fmt.Errorf("field rule %q: %s's data has no string field %q", r.String(), r.Type, r.Field)
		}
		if msg := refusesMarker(r.Type, r.Field, marker(r.Name())); msg != "" {
			return nil, fmt.Errorf("field rule %q: the contract refuses a marker in it (%s): it is not free text", r.String(), msg)
		}
		return []topics.EventType{r.Type}, nil
	}
	var out []topics.EventType
	for _, t := range topics.EventTypes() {
		if _, ok := stringField(reflect.TypeOf(topics.NewPayload(t)).Elem(), r.Field); ok && refusesMarker(t, r.Field, marker(r.Name())) == "" {
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("field rule %q: no event type's data has a string field %q that can hold text (docs/CONTRACT.md lists each type's fields)", r.String(), r.Field)
	}
	return out, nil
}

// refusesMarker is the contract's problem with mark as the value of field
// name of typ's data, "" when it has none.
func refusesMarker(typ topics.EventType, name, mark string) string {
	payload := topics.NewPayload(typ)
	v := reflect.ValueOf(payload).Elem()
	// The other fields hold an identifier, so that the decoder reaches
	// the field's own check (an empty string is refused before).
	for i := range v.NumField() {
		switch f := v.Field(i); {
		case !v.Type().Field(i).IsExported():
		case f.Kind() == reflect.String:
			f.SetString("x1")
		case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.String:
			f.Set(reflect.Append(f, reflect.ValueOf("x1").Convert(f.Type().Elem())))
		}
	}
	i, _ := stringField(v.Type(), name)
	v.Field(i).SetString(mark)
	ev := topics.Event{ID: "redact-check", Source: "/redact", Type: typ, Time: topics.NewTime(time.Unix(0, 0)), RunID: "redact-check",
		AgentID: "redact-check", SchemaVersion: topics.CurrentSchemaVersion, Data: payload}
	var de *topics.DecodeError
	if err := ev.Validate(); errors.As(err, &de) {
		for _, p := range de.Problems {
			if p.Field == "data."+name {
				return p.Problem
			}
		}
	}
	return ""
}

// PatternRule is an operator's rule: every match of Pattern in a free-text
// field becomes "[redacted:<Name>]".
type PatternRule struct {
	// Name names the rule in its marker and its metric label: lower-case
	// letters, digits and underscores, starting with a letter, at most 40,
	// and not a built-in rule's name.
	Name string
	// Pattern is a regular expression (Go's RE2 syntax).
	Pattern string
}

// String is the rule as ParsePatternRule reads it: "name=pattern".
func (r PatternRule) String() string { return r.Name + "=" + r.Pattern }

// ParsePatternRule reads "name=pattern", e.g. `internal_host=\b[a-z0-9-]+\.corp\.example\.com\b`,
// and checks both.
func ParsePatternRule(s string) (PatternRule, error) {
	name, pattern, ok := strings.Cut(s, "=")
	if !ok {
		return PatternRule{}, fmt.Errorf("pattern rule %q: want name=regexp, e.g. internal_host=\\.corp\\.example\\.com\\b", s)
	}
	r := PatternRule{Name: strings.TrimSpace(name), Pattern: pattern}
	_, err := r.compile()
	return r, err
}

var ruleName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,39}$`)

// compile checks r and compiles its pattern.
func (r PatternRule) compile() (*regexp.Regexp, error) {
	var errs []error
	switch {
	case !ruleName.MatchString(r.Name):
		errs = append(errs, fmt.Errorf("pattern rule %q: name %q: want lower-case letters, digits and _, starting with a letter, at most 40", r.String(), r.Name))
	case slices.Contains(BuiltinRules(), r.Name) || r.Name == RuleOverflow:
		errs = append(errs, fmt.Errorf("pattern rule %q: %q is a built-in rule's name; choose another", r.String(), r.Name))
	}
	re, err := regexp.Compile(r.Pattern)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("pattern rule %q: %w (Go RE2 syntax: https://pkg.go.dev/regexp/syntax)", r.String(), err))
	case r.Pattern == "":
		errs = append(errs, fmt.Errorf("pattern rule %q: empty pattern", r.String()))
	case re.MatchString(""):
		errs = append(errs, fmt.Errorf("pattern rule %q: the pattern matches the empty string; make it match a secret's text (use + rather than *)", r.String()))
	}
	return re, errors.Join(errs...)
}

// Rules returns the names of the rules of c's policy (Policy.Rules),
// without compiling it: what a metric's series are made for in advance.
func (c Config) Rules() []string {
	out := BuiltinRules()
	for _, r := range c.Patterns {
		out = append(out, r.Name)
	}
	for _, r := range c.Fields {
		out = append(out, r.Name())
	}
	return append(out, RuleOverflow)
}

// Validate reports every problem of c in one error wrapping ErrConfig, each
// with what to fix.
func (c Config) Validate() error {
	_, err := New(c)
	return err
}

// Policy is a compiled redaction policy: safe for concurrent use, and
// built once (New) for a process.
type Policy struct {
	textRules []textRule
	// fields are, per event type, the fields the policy rewrites.
	fields map[topics.EventType]*typeFields
	// markers are the names whose markers redaction leaves alone.
	markers map[string]bool
	rules   []string
}

// typeFields are the fields of one event type's data a Policy rewrites.
type typeFields struct {
	typ    reflect.Type // the data's struct type
	fields []field
}

// field is one field a Policy rewrites: its free text, or its whole value
// (marker set).
type field struct {
	index  int
	limit  int    // in code points
	marker string // a field rule's marker; "" for free text
	rule   string
}

// New compiles the policy of c: the built-in rules, then c's. Its error
// lists every problem of c and wraps ErrConfig.
func New(c Config) (*Policy, error) {
	p := &Policy{textRules: make([]textRule, 0, len(builtins)+len(c.Patterns)), fields: map[topics.EventType]*typeFields{}, markers: map[string]bool{RuleOverflow: true}}
	for _, r := range builtins {
		p.textRules = append(p.textRules, r.compiled())
	}
	var errs []error
	names := map[string]bool{}
	for _, r := range c.Patterns {
		re, err := r.compile()
		if err == nil && names[r.Name] {
			err = fmt.Errorf("pattern rule %q: the name %q is given twice", r.String(), r.Name)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		names[r.Name] = true
		p.textRules = append(p.textRules, textRule{name: r.Name, re: re})
	}
	for _, r := range p.textRules {
		p.markers[r.name] = true
		p.rules = append(p.rules, r.name)
	}
	if err := p.addFields(c.Fields); err != nil {
		errs = append(errs, err)
	}
	p.rules = append(p.rules, RuleOverflow)
	if err := errors.Join(errs...); err != nil {
		// On one line, as the commands' configuration errors are.
		return nil, fmt.Errorf("%w: %s", ErrConfig, strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	return p, nil
}

// addFields adds the free-text fields of every event type and the field
// rules.
func (p *Policy) addFields(rules []FieldRule) error {
	var errs []error
	for typ, names := range topics.FreeTextFields {
		for _, name := range names {
			if err := p.addField(typ, name, "", ""); err != nil {
				errs = append(errs, fmt.Errorf("topics.FreeTextFields: %w", err))
			}
		}
	}
	seen := map[FieldRule]bool{}
	for _, r := range rules {
		types, err := r.targets()
		if err == nil && seen[r] {
			err = fmt.Errorf("field rule %q is given twice", r.String())
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		seen[r] = true
		p.markers[r.Name()] = true
		p.rules = append(p.rules, r.Name())
		for _, t := range types {
			errs = append(errs, p.addField(t, r.Field, marker(r.Name()), r.Name()))
		}
	}
	// One order whatever the maps': fields in their struct's order.
	for _, tf := range p.fields {
		slices.SortFunc(tf.fields, func(a, b field) int { return a.index - b.index })
	}
	return errors.Join(errs...)
}

// addField adds the field name of typ's data: free text when mark is "",
// else replaced whole by mark. A field rule on a free-text field wins.
func (p *Policy) addField(typ topics.EventType, name, mark, rule string) error {
	payload := topics.NewPayload(typ)
	if payload == nil {
		return fmt.Errorf("unknown event type %q", typ)
	}
	st := reflect.TypeOf(payload).Elem()
	i, ok := stringField(st, name)
	if !ok {
		return fmt.Errorf("%s's data has no string field %q", typ, name)
	}
	tf := p.fields[typ]
	if tf == nil {
		tf = &typeFields{typ: st}
		p.fields[typ] = tf
	}
	f := field{index: i, limit: fieldLimit(typ, name), marker: mark, rule: rule}
	for j := range tf.fields {
		if tf.fields[j].index == i {
			if mark != "" && tf.fields[j].marker == "" {
				tf.fields[j] = f
			}
			return nil
		}
	}
	tf.fields = append(tf.fields, f)
	return nil
}

// stringField is the index of the exported field of st whose JSON name is
// name, when it is a plain string (not an enumeration's named type).
func stringField(st reflect.Type, name string) (int, bool) {
	for i := range st.NumField() {
		f := st.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.IsExported() && tag == name && f.Type == reflect.TypeFor[string]() {
			return i, true
		}
	}
	return 0, false
}

// fieldLimit is the most code points the contract allows in field name of
// typ's data: what a redacted value must stay within for the event to
// decode again.
func fieldLimit(typ topics.EventType, name string) int {
	switch {
	case typ == topics.TypeInput && name == "text":
		return topics.MaxInputTextLength
	case slices.Contains(topics.FreeTextFields[typ], name):
		return topics.MaxSummaryLength
	default:
		return topics.MaxIDLength
	}
}

var defaultPolicy = sync.OnceValue(func() *Policy {
	p, err := New(Config{})
	if err != nil {
		// The built-in rules and topics.FreeTextFields are this build's
		// own: TestDefault fails first.
		panic(err)
	}
	return p
})

// Default is the policy of the built-in rules alone.
func Default() *Policy { return defaultPolicy() }

// Rules returns the names of the policy's rules: the built-in ones, the
// operator's patterns and fields, and RuleOverflow, in that order: the
// label values of canopy_redactions_total.
func (p *Policy) Rules() []string { return slices.Clone(p.rules) }

// Event redacts ev's data in place: its free-text fields, and the fields
// of the policy's field rules. redacted, when not nil, is called once per
// replacement with its rule's name. It returns how many replacements it
// made. Types with neither cost one map lookup.
func (p *Policy) Event(ev *topics.Event, redacted func(rule string)) int {
	tf := p.fields[ev.Type]
	if tf == nil || ev.Data == nil {
		return 0
	}
	v := reflect.ValueOf(ev.Data)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Type() != tf.typ {
		return 0 // data of another type than ev.Type's: not what the decoder makes
	}
	v = v.Elem()
	n := 0
	for _, f := range tf.fields {
		fv := v.Field(f.index)
		s := fv.String()
		if s == "" {
			continue
		}
		out := f.marker
		if out == "" {
			var k int
			out, k = p.text(s, f.limit, redacted)
			n += k
		} else if s != out {
			n++
			if redacted != nil {
				redacted(f.rule)
			}
		}
		if out != s {
			fv.SetString(out)
		}
	}
	return n
}

// Text redacts free text s, keeping it within limit code points (0: no
// limit), and returns it with how many replacements were made; redacted,
// when not nil, is called once per replacement with its rule's name. Text
// that is not valid UTF-8 has each invalid byte replaced by U+FFFD first.
func (p *Policy) Text(s string, limit int, redacted func(rule string)) (string, int) {
	if limit <= 0 {
		limit = int(^uint(0) >> 1)
	}
	return p.text(s, limit, redacted)
}

// maxPasses bounds how many times text is redacted again until nothing
// changes: a second pass finds what the first one's replacements or its
// cut to the limit exposed (a match that needed what followed it).
const maxPasses = 4

// text redacts s until it is a fixed point within limit, so that
// redacting its result again changes nothing.
func (p *Policy) text(s string, limit int, redacted func(string)) (string, int) {
	n := 0
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	for range maxPasses {
		t, k := p.once(s, redacted)
		n += k
		t = p.cut(t, limit)
		if t == s {
			return s, n
		}
		s = t
	}
	if redacted != nil {
		redacted(RuleOverflow)
	}
	return marker(RuleOverflow), n + 1
}

// once applies every text rule to s once, in order.
func (p *Policy) once(s string, redacted func(string)) (string, int) {
	n := 0
	present := bytesOf(s)
	for i := range p.textRules {
		r := &p.textRules[i]
		var k int
		s, k = p.apply(r, s, &present)
		if k > 0 {
			present = bytesOf(s)
		}
		for range k {
			if redacted != nil {
				redacted(r.name)
			}
		}
		n += k
	}
	return s, n
}

// apply replaces r's matches in s. A match that is empty, that r's check
// refuses, or that overlaps a marker already in s is left alone: markers
// are never redacted again, which keeps redaction idempotent.
func (p *Policy) apply(r *textRule, s string, present *byteSet) (string, int) {
	var (
		b            strings.Builder
		marks        [][2]int
		last, n, j   int
		markersFound bool
	)
	r.find(s, present, func(start, end int) {
		if start < 0 || start == end {
			return
		}
		if !markersFound {
			marks, markersFound = p.markerSpans(s), true
		}
		// Matches and markers both come in order: j is the first marker
		// that ends after this match starts.
		for j < len(marks) && marks[j][1] <= start {
			j++
		}
		if j < len(marks) && marks[j][0] < end || r.valid != nil && !r.valid(s[start:end]) {
			return
		}
		if n == 0 {
			b.Grow(len(s))
		}
		b.WriteString(s[last:start])
		b.WriteString(marker(r.name))
		last = end
		n++
	})
	if n == 0 {
		return s, 0
	}
	b.WriteString(s[last:])
	return b.String(), n
}

const markerPrefix = "[redacted:"

// marker is the replacement of rule's matches.
func marker(rule string) string { return markerPrefix + rule + "]" }

// markerSpans are the byte ranges of the markers of p's rules in s.
func (p *Policy) markerSpans(s string) [][2]int {
	var spans [][2]int
	for off := 0; ; {
		i := strings.Index(s[off:], markerPrefix)
		if i < 0 {
			return spans
		}
		start := off + i
		rest := s[start+len(markerPrefix):]
		off = start + len(markerPrefix)
		if j := strings.IndexByte(rest, ']'); j >= 0 && p.markers[rest[:j]] {
			end := off + j + 1
			spans = append(spans, [2]int{start, end})
			off = end
		}
	}
}

// cut keeps s within limit code points, at a character's start and never
// inside a marker (half a marker would read as text).
func (p *Policy) cut(s string, limit int) string {
	if len(s) <= limit || utf8.RuneCountInString(s) <= limit {
		return s
	}
	at, k := 0, 0
	for i := range s {
		if k == limit {
			at = i
			break
		}
		k++
	}
	for _, sp := range p.markerSpans(s) {
		if sp[0] < at && at < sp[1] {
			at = sp[0]
		}
	}
	return s[:at]
}
