package redact_test

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/canopy-dev/canopy/pkg/redact"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// builtinCases are, for each built-in rule, text it must redact (with what
// it becomes) and a near miss it must leave alone.
var builtinCases = []struct {
	rule, in, want, nearMiss string
}{
	{redact.RulePrivateKey,
		"key: -----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7\n-----END RSA PRIVATE KEY----- done",
		"key: [redacted:private_key] done",
		"-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8A\n-----END PUBLIC KEY-----"},
	{redact.RulePrivateKey,
		"pasted -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA", // cut before its END line
		"pasted [redacted:private_key]",
		"-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIBAgIE"},
	{redact.RuleURLPassword,
		"psql postgres://app:s3cr3t@db.internal:5432/orders",
		"psql postgres://app:[redacted:url_password]@db.internal:5432/orders",
		"see https://example.com:8443/path and git@github.com:org/repo.git and ssh://git@host/x"},
	{redact.RuleAnthropicKey,
		"ANTHROPIC key sk-ant-api03-Zx9yW8vU7tS6rQ5pO4nM3lK2jI1hG0fE",
		"ANTHROPIC key [redacted:anthropic_key]",
		"the sk-ant-short prefix"},
	{redact.RuleOpenAIKey,
		"use sk-proj-Ab3dEf6hIj9kLmN0pQrStUvWxYz12 now",
		"use [redacted:openai_key] now",
		"a risk-assessment-framework-document and sk-learn-is-not-a-key-at-all-really"},
	{redact.RuleGitHubToken,
		"git clone https://x:ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789@github.com/o/r",
		"git clone https://x:[redacted:url_password]@github.com/o/r",
		"ghp_short and github_pat_tooshort"},
	{redact.RuleGitHubToken,
		"GH token github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
		"GH token [redacted:github_token]",
		"the gho_ prefix alone"},
	{redact.RuleSlackToken,
		"SLACK xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOp",
		"SLACK [redacted:slack_token]",
		"xoxo-gossip-girl-forever and xoxb-no-digits-here"},
	{redact.RuleAWSAccessKey,
		"aws configure set aws_access_key_id AKIAIOSFODNN7EXAMPLE",
		"aws configure set aws_access_key_id [redacted:aws_access_key]",
		"AKIAIOSFODNN7EXAMPL and AKIAIOSFODNN7EXAMPLEX"},
	{redact.RuleGoogleAPIKey,
		"maps?key=AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
		"maps?key=[redacted:google_api_key]",
		"AIzaShort"},
	{redact.RuleJWT,
		"cookie eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U;",
		"cookie [redacted:jwt];",
		"header eyJhbGciOiJIUzI1NiJ9 alone"},
	{redact.RuleBearerToken,
		"curl -H 'Authorization: Bearer 4f9a8b7c6d5e4f3a2b1c' https://api",
		"curl -H 'Authorization: Bearer [redacted:bearer_token]' https://api",
		"the bearer of this letter and Bearer authentication-scheme-here"},
	{redact.RuleBasicAuth,
		"Authorization: Basic dXNlcjpwYXNzd29yZA==",
		"Authorization: Basic [redacted:basic_auth]",
		"a basic understanding of basic instructions"},
	{redact.RuleSecretAssignment,
		"mysql --password=hunter22 -h db; export DB_PASSWORD='abc123'; client_secret: x9y8z7",
		"mysql --password=[redacted:secret_assignment] -h db; export DB_PASSWORD='[redacted:secret_assignment]'; client_secret: [redacted:secret_assignment]",
		"password reset link sent; max_tokens: 12; the secret of success"},
}

// TestBuiltinRules: each built-in rule redacts its secret, names itself in
// the marker and the count, and leaves its near miss alone.
func TestBuiltinRules(t *testing.T) {
	p := redact.Default()
	covered := map[string]bool{}
	for _, c := range builtinCases {
		t.Run(c.rule, func(t *testing.T) {
			var rules []string
			got, n := p.Text(c.in, 0, func(r string) { rules = append(rules, r) })
			if got != c.want {
				t.Errorf("Text(%q)\n got %q\nwant %q", c.in, got, c.want)
			}
			if n == 0 || n != len(rules) || !slices.Contains(rules, markerOf(c.want)) {
				t.Errorf("Text(%q): %d replacements, rules %v", c.in, n, rules)
			}
			if got, n := p.Text(c.nearMiss, 0, nil); got != c.nearMiss || n != 0 {
				t.Errorf("near miss Text(%q) = %q, %d replacements; want it unchanged", c.nearMiss, got, n)
			}
		})
		covered[c.rule] = true
	}
	for _, r := range redact.BuiltinRules() {
		if !covered[r] {
			t.Errorf("built-in rule %s has no case", r)
		}
	}
}

// markerOf is the rule name of the first marker in s.
func markerOf(s string) string {
	i := strings.Index(s, "[redacted:") + len("[redacted:")
	return s[i : i+strings.IndexByte(s[i:], ']')]
}

// TestDefault: the built-in policy builds (its rules and
// topics.FreeTextFields resolve to string fields of this build's
// payloads) and names its rules in order.
func TestDefault(t *testing.T) {
	if _, err := redact.New(redact.Config{}); err != nil {
		t.Fatal(err)
	}
	if got, want := redact.Default().Rules(), append(redact.BuiltinRules(), redact.RuleOverflow); !slices.Equal(got, want) {
		t.Errorf("Rules() = %v, want %v", got, want)
	}
	for typ, fields := range topics.FreeTextFields {
		for _, f := range fields {
			ev := &topics.Event{Type: typ, Data: topics.NewPayload(typ)}
			setField(t, ev.Data, f, "token=abc123")
			if n := redact.Default().Event(ev, nil); n != 1 || getField(t, ev.Data, f) != "token=[redacted:secret_assignment]" {
				t.Errorf("%s.%s: %d replacements, %q", typ, f, n, getField(t, ev.Data, f))
			}
		}
	}
}

// TestCleanTextIsUntouched: text without a secret comes back as it is,
// the same string, without a replacement or an allocation.
func TestCleanTextIsUntouched(t *testing.T) {
	p := redact.Default()
	for _, s := range []string{"", "focus on the failing node", "go test ./... -run TestX -count=1", "日本語のテキスト: 東京=首都",
		"see https://example.com/a?b=c", "ready: 3/5 passed"} {
		got, n := p.Text(s, 0, nil)
		if got != s || n != 0 {
			t.Errorf("Text(%q) = %q, %d", s, got, n)
		}
	}
	s := "please summarise what is blocked and retry the failing build"
	if a := testing.AllocsPerRun(100, func() { p.Text(s, 0, nil) }); a != 0 {
		t.Errorf("clean text: %v allocations, want 0", a)
	}
}

// TestOperatorRules: an operator's patterns run after the built-in rules,
// in their order; field rules replace a whole value; both count.
func TestOperatorRules(t *testing.T) {
	host, err := redact.ParsePatternRule(`internal_host=\b[a-z0-9-]+\.corp\.example\.com\b`)
	if err != nil {
		t.Fatal(err)
	}
	ticket, err := redact.ParsePatternRule(`ticket=\bSEC-[0-9]+\b`)
	if err != nil {
		t.Fatal(err)
	}
	label, err := redact.ParseFieldRule("tree.artifact_created:label")
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := redact.ParseFieldRule("command") // free text of tool.started and process.started
	if err != nil {
		t.Fatal(err)
	}
	p, err := redact.New(redact.Config{Patterns: []redact.PatternRule{host, ticket}, Fields: []redact.FieldRule{label, cmd}})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	count := func(r string) { counts[r]++ }
	got, _ := p.Text("ssh build-7.corp.example.com about SEC-42 with sk-proj-Ab3dEf6hIj9kLmN0pQrStUvWxYz12", 0, count)
	if want := "ssh [redacted:internal_host] about [redacted:ticket] with [redacted:openai_key]"; got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	ev := &topics.Event{Type: topics.TypeArtifactCreated, Data: &topics.ArtifactCreated{ArtifactID: "a1", ArtifactType: "document", Label: "Q3 layoffs plan"}}
	if n := p.Event(ev, count); n != 1 || ev.Data.(*topics.ArtifactCreated).Label != "[redacted:field:tree.artifact_created:label]" ||
		ev.Data.(*topics.ArtifactCreated).ArtifactID != "a1" {
		t.Errorf("artifact: %d replacements, data %+v", n, ev.Data)
	}
	for _, typ := range []topics.EventType{topics.TypeToolStarted, topics.TypeProcessStarted} {
		ev := &topics.Event{Type: typ, Data: topics.NewPayload(typ)}
		setField(t, ev.Data, "command", "ls -la")
		p.Event(ev, count)
		if got := getField(t, ev.Data, "command"); got != "[redacted:field:command]" {
			t.Errorf("%s command = %q", typ, got)
		}
	}
	want := map[string]int{"internal_host": 1, "ticket": 1, "openai_key": 1, "field:tree.artifact_created:label": 1, "field:command": 2}
	if !reflect.DeepEqual(counts, want) {
		t.Errorf("counts %v, want %v", counts, want)
	}
	rules := p.Rules()
	wantRules := append(redact.BuiltinRules(), "internal_host", "ticket", "field:tree.artifact_created:label", "field:command", redact.RuleOverflow)
	if !slices.Equal(rules, wantRules) {
		t.Errorf("Rules() = %v\nwant %v", rules, wantRules)
	}
	cfg := redact.Config{Patterns: []redact.PatternRule{host, ticket}, Fields: []redact.FieldRule{label, cmd}}
	if got := cfg.Rules(); !slices.Equal(got, wantRules) {
		t.Errorf("Config.Rules() = %v\nwant %v", got, wantRules)
	}
}

// TestConfigErrors: every problem of a configuration is reported at once,
// each saying what to fix.
func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		spec, want string
		field      bool
	}{
		{"nameless", "want name=regexp", false},
		{"Bad-Name=x", "lower-case letters", false},
		{"openai_key=x", "built-in rule's name", false},
		{"broken=(unclosed", "missing closing )", false},
		{"empty=", "empty pattern", false},
		{"star=a*", "matches the empty string", false},
		{"", "no field", true},
		{"no_such_field_anywhere", "no event type's data has a string field", true},
		{"no.such_type:label", "unknown event type", true},
		{"tree.artifact_created:artifact_ids", "has no string field", true},    // a list
		{"tool.finished:outcome", "the contract refuses a marker in it", true}, // an enumeration
		{"tree.node_created:role", "has no string field", true},                // an enumeration's type
	} {
		var err error
		if c.field {
			_, err = redact.ParseFieldRule(c.spec)
		} else {
			_, err = redact.ParsePatternRule(c.spec)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want it to say %q", c.spec, err, c.want)
		}
	}
	// New reports all of them, wrapping ErrConfig.
	_, err := redact.New(redact.Config{
		Patterns: []redact.PatternRule{{Name: "dup", Pattern: "x+"}, {Name: "dup", Pattern: "y+"}, {Name: "bad", Pattern: "(unclosed"}},
		Fields:   []redact.FieldRule{{Type: "no.such", Field: "label"}},
	})
	if !errors.Is(err, redact.ErrConfig) || !strings.Contains(err.Error(), "given twice") || !strings.Contains(err.Error(), "missing closing )") ||
		!strings.Contains(err.Error(), "unknown event type") {
		t.Errorf("New: %v", err)
	}
	// A field rule without a type leaves enumerations alone: state is one
	// in limit.updated and channel.state, and text nowhere.
	if _, err := redact.ParseFieldRule("state"); err == nil {
		t.Error(`field rule "state": accepted, but no type's state can hold text`)
	}
}

// TestLimits: a redacted field stays within its contract limit, and the
// event still validates, however much the replacements lengthen it; and
// the limit redaction assumes for each free-text field is the decoder's.
func TestLimits(t *testing.T) {
	short, _ := redact.ParsePatternRule("a=a")
	p, err := redact.New(redact.Config{Patterns: []redact.PatternRule{short}})
	if err != nil {
		t.Fatal(err)
	}
	for typ, fields := range topics.FreeTextFields {
		for _, f := range fields {
			limit := topics.MaxSummaryLength
			if typ == topics.TypeInput {
				limit = topics.MaxInputTextLength
			}
			if msg := fieldProblem(t, typ, f, strings.Repeat("é", limit)); msg != "" {
				t.Errorf("%s.%s: %d characters refused (%s): redact's limit is not the contract's", typ, f, limit, msg)
			}
			if msg := fieldProblem(t, typ, f, strings.Repeat("é", limit+1)); msg == "" {
				t.Errorf("%s.%s: %d characters accepted: redact's limit is not the contract's", typ, f, limit+1)
			}
			ev := &topics.Event{Type: typ, Data: topics.NewPayload(typ)}
			setField(t, ev.Data, f, strings.Repeat("a", limit))
			n := p.Event(ev, nil)
			got := getField(t, ev.Data, f)
			if utf8.RuneCountInString(got) > limit || n == 0 {
				t.Errorf("%s.%s: %d characters after %d replacements; limit %d", typ, f, utf8.RuneCountInString(got), n, limit)
			}
			if msg := fieldProblem(t, typ, f, got); msg != "" {
				t.Errorf("%s.%s: the contract refuses the redacted text: %s", typ, f, msg)
			}
			if strings.Contains(got, "a]") && !strings.HasSuffix(got, "[redacted:a]") {
				t.Errorf("%s.%s: cut inside a marker: ...%q", typ, f, got[len(got)-20:])
			}
		}
	}
}

// TestDeterministic: two policies of one configuration, made apart, give
// the same bytes for the same events, whatever the order of Go's maps.
func TestDeterministic(t *testing.T) {
	cfg := func() redact.Config {
		host, _ := redact.ParsePatternRule(`host=\bh[0-9]+\b`)
		f1, _ := redact.ParseFieldRule("label")
		f2, _ := redact.ParseFieldRule("turn.completed:error_code")
		return redact.Config{Patterns: []redact.PatternRule{host}, Fields: []redact.FieldRule{f2, f1}}
	}
	var outs [][]byte
	for range 5 {
		p, err := redact.New(cfg())
		if err != nil {
			t.Fatal(err)
		}
		var all []byte
		for _, typ := range topics.EventTypes() {
			ev := &topics.Event{ID: "e1", Source: "/test", Type: typ, RunID: "r1", AgentID: "a1", Data: topics.NewPayload(typ)}
			for _, f := range topics.FreeTextFields[typ] {
				setField(t, ev.Data, f, "at h12 with sk-proj-Ab3dEf6hIj9kLmN0pQrStUvWxYz12 and Bearer 0123456789abcdefXYZ")
			}
			p.Event(ev, nil)
			b, err := ev.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, b...)
		}
		outs = append(outs, all)
	}
	for i := 1; i < len(outs); i++ {
		if string(outs[i]) != string(outs[0]) {
			t.Fatalf("policy %d redacted differently from policy 0", i)
		}
	}
	if strings.Contains(string(outs[0]), "sk-proj") || !strings.Contains(string(outs[0]), "[redacted:host]") {
		t.Errorf("the events were not redacted: %s", outs[0])
	}
}

// TestIdempotent: redacting redacted text changes nothing and counts
// nothing, so that text the gateway redacted passes the projector as it is.
func TestIdempotent(t *testing.T) {
	p := redact.Default()
	for _, c := range builtinCases {
		once, _ := p.Text(c.in, 0, nil)
		twice, n := p.Text(once, 0, nil)
		if twice != once || n != 0 {
			t.Errorf("Text(Text(%q)) = %q (%d replacements), want %q", c.in, twice, n, once)
		}
	}
}

// TestEventLeavesOtherFields: ids, enums and the envelope are never
// rewritten by the built-in rules, even when they look like secrets.
func TestEventLeavesOtherFields(t *testing.T) {
	secret := "sk-proj-Ab3dEf6hIj9kLmN0pQrStUvWxYz12"
	ev := &topics.Event{ID: secret, Type: topics.TypeToolStarted, RunID: secret,
		Data: &topics.ToolStarted{CallID: secret, ToolName: "shell", Command: "echo " + secret}}
	if n := redact.Default().Event(ev, nil); n != 1 {
		t.Errorf("%d replacements, want 1", n)
	}
	d := ev.Data.(*topics.ToolStarted)
	if ev.ID != secret || ev.RunID != secret || d.CallID != secret || d.Command != "echo [redacted:openai_key]" {
		t.Errorf("event %+v, data %+v", ev, d)
	}
}

// setField sets the string field of data whose JSON name is name.
func setField(t *testing.T, data topics.Payload, name, v string) {
	t.Helper()
	fieldOf(t, data, name).SetString(v)
}

// getField is the string field of data whose JSON name is name.
func getField(t *testing.T, data topics.Payload, name string) string {
	t.Helper()
	return fieldOf(t, data, name).String()
}

func fieldOf(t *testing.T, data topics.Payload, name string) reflect.Value {
	t.Helper()
	v := reflect.ValueOf(data).Elem()
	for i := range v.NumField() {
		if tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ","); tag == name {
			return v.Field(i)
		}
	}
	t.Fatalf("%T has no field %q", data, name)
	return reflect.Value{}
}

// fieldProblem is the contract's problem with v as field name of typ's
// data, "" when it has none (other fields' problems aside).
func fieldProblem(t *testing.T, typ topics.EventType, name, v string) string {
	t.Helper()
	ev := &topics.Event{ID: "e1", Source: "/test", Type: typ, Time: topics.NewTime(time.Unix(1700000000, 0)), RunID: "r1", AgentID: "a1",
		SchemaVersion: topics.CurrentSchemaVersion, Data: topics.NewPayload(typ)}
	d := reflect.ValueOf(ev.Data).Elem()
	for i := range d.NumField() {
		if f := d.Field(i); d.Type().Field(i).IsExported() && f.Kind() == reflect.String {
			f.SetString("x1")
		}
	}
	setField(t, ev.Data, name, v)
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
