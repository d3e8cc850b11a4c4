package topics_test

import (
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/pkg/topics"
)

func TestDefaultNames(t *testing.T) {
	n := topics.DefaultNames()
	if n.Prefix != "canopy" || n.Version != 1 || n != (topics.Names{Prefix: topics.DefaultPrefix, Version: topics.DefaultVersion}) {
		t.Fatalf("DefaultNames = %+v", n)
	}
	if err := n.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ got, want string }{
		{n.AgentEvents(), "canopy.agent-events.v1"},
		{n.HumanInput(), "canopy.human-input.v1"},
		{n.Changelog(), "canopy.projector-changelog.v1"},
		{n.Wakes(), "canopy.wakes.v1"},
		{n.PriorityWakes(), "canopy.wakes-priority.v1"},
		{n.DeadLetter(), "canopy.dead-letter.v1"},
		{n.WakeTopic(topics.LaneNormal), "canopy.wakes.v1"},
		{n.WakeTopic(topics.LanePriority), "canopy.wakes-priority.v1"},
		{n.WakeTopic(""), "canopy.wakes.v1"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestNamesPrefixAndVersion(t *testing.T) {
	n := topics.Names{Prefix: "acme.prod_eu-1", Version: 12}
	if err := n.Validate(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		n.AgentEvents():   "acme.prod_eu-1.agent-events.v12",
		n.HumanInput():    "acme.prod_eu-1.human-input.v12",
		n.Changelog():     "acme.prod_eu-1.projector-changelog.v12",
		n.Wakes():         "acme.prod_eu-1.wakes.v12",
		n.PriorityWakes(): "acme.prod_eu-1.wakes-priority.v12",
		n.DeadLetter():    "acme.prod_eu-1.dead-letter.v12",
	}
	if len(want) != 6 {
		t.Fatalf("topic names collide: %v", want)
	}
	for got, w := range want {
		if got != w {
			t.Errorf("got %q, want %q", got, w)
		}
	}
	// A new version never shares a topic with the old one.
	v2 := topics.Names{Prefix: n.Prefix, Version: 13}
	old := map[string]bool{}
	for _, s := range n.Specs(1) {
		old[s.Name] = true
	}
	for _, s := range v2.Specs(1) {
		if old[s.Name] {
			t.Errorf("version 13 reuses %q", s.Name)
		}
	}
}

func TestNamesValidate(t *testing.T) {
	ok := []topics.Names{
		{Prefix: "a", Version: 1},
		{Prefix: "A-b_c.9", Version: 2},
		{Prefix: strings.Repeat("p", 200), Version: 1},
		{Prefix: "canopy", Version: math.MaxInt},
	}
	for _, n := range ok {
		if err := n.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", n, err)
		}
	}
	bad := []struct {
		n    topics.Names
		msgs []string
	}{
		{topics.Names{}, []string{`topics: prefix ""`, "use letters, digits, '.', '_' and '-'"}},
		{topics.Names{Version: 1}, []string{`prefix ""`}},
		{topics.Names{Prefix: "has space", Version: 1}, []string{`prefix "has space": use letters`}},
		{topics.Names{Prefix: "a/b", Version: 1}, []string{`prefix "a/b"`}},
		{topics.Names{Prefix: "ünï", Version: 1}, []string{`prefix "ünï"`}},
		{topics.Names{Prefix: "tab\t", Version: 1}, []string{`prefix "tab\t"`}},
		{topics.Names{Prefix: "a:b", Version: 1}, []string{`prefix "a:b"`}},
		{topics.Names{Prefix: strings.Repeat("p", 201), Version: 1}, []string{"prefix is longer than 200 characters"}},
		{topics.Names{Prefix: "canopy", Version: 0}, []string{"version 0: must be 1 or more"}},
		{topics.Names{Prefix: "canopy", Version: -3}, []string{"version -3: must be 1 or more"}},
	}
	for _, c := range bad {
		err := c.n.Validate()
		if err == nil {
			t.Errorf("Validate(%+v) = nil", c.n)
			continue
		}
		for _, m := range c.msgs {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("Validate(%+v) = %q, want it to contain %q", c.n, err, m)
			}
		}
	}
}

// kafkaTopicName is Kafka's rule for topic names (Topic.validate).
var kafkaTopicName = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

func TestSpecs(t *testing.T) {
	n := topics.DefaultNames()
	specs := n.Specs(12)
	byName := map[string]topics.Spec{}
	for _, s := range specs {
		if _, dup := byName[s.Name]; dup {
			t.Errorf("duplicate spec %q", s.Name)
		}
		byName[s.Name] = s
		if s.Partitions != 12 {
			t.Errorf("%s: %d partitions, want 12", s.Name, s.Partitions)
		}
	}
	if len(specs) != 6 {
		t.Fatalf("%d specs, want 6", len(specs))
	}
	week := strconv.Itoa(7 * 24 * 3600 * 1000)
	day := strconv.Itoa(24 * 3600 * 1000)
	want := []struct {
		name     string
		copart   bool
		compact  bool
		retained string
	}{
		{n.AgentEvents(), true, false, week},
		{n.HumanInput(), true, false, week},
		{n.Changelog(), true, true, ""},
		{n.Wakes(), true, false, day},
		{n.PriorityWakes(), true, false, day},
		{n.DeadLetter(), false, false, week},
	}
	for _, w := range want {
		s, ok := byName[w.name]
		if !ok {
			t.Errorf("no spec for %s", w.name)
			continue
		}
		if s.CoPartitioned != w.copart {
			t.Errorf("%s: CoPartitioned = %v, want %v", w.name, s.CoPartitioned, w.copart)
		}
		policy := s.Configs["cleanup.policy"]
		if w.compact {
			if policy != "compact" {
				t.Errorf("%s: cleanup.policy = %q, want compact", w.name, policy)
			}
			if _, ok := s.Configs["retention.ms"]; ok {
				t.Errorf("%s: a compacted changelog must not expire by time: %v", w.name, s.Configs)
			}
			if lag, err := strconv.Atoi(s.Configs["min.compaction.lag.ms"]); err != nil || lag <= 0 {
				t.Errorf("%s: min.compaction.lag.ms = %q", w.name, s.Configs["min.compaction.lag.ms"])
			}
			// Tombstones for a day, Kafka's default, in segments of an
			// hour that Apache Kafka's cleaner can clean within it.
			if got := s.Configs["delete.retention.ms"]; got != day {
				t.Errorf("%s: delete.retention.ms = %q, want %q", w.name, got, day)
			}
			if got := s.Configs["segment.ms"]; got != "3600000" {
				t.Errorf("%s: segment.ms = %q, want 3600000", w.name, got)
			}
		} else {
			if policy != "" && policy != "delete" {
				t.Errorf("%s: cleanup.policy = %q", w.name, policy)
			}
			if got := s.Configs["retention.ms"]; got != w.retained {
				t.Errorf("%s: retention.ms = %q, want %q", w.name, got, w.retained)
			}
		}
		for k, v := range s.Configs {
			if k == "" || v == "" {
				t.Errorf("%s: empty config %q=%q", w.name, k, v)
			}
		}
	}

	// Specs are fresh values: changing one does not change the next.
	specs[0].Configs["retention.ms"] = "1"
	if got := n.Specs(12)[0].Configs["retention.ms"]; got != week {
		t.Errorf("Specs shares its config maps: retention.ms = %q", got)
	}

	// The partition count is passed through.
	for _, p := range []int32{1, 3, 256} {
		for _, s := range n.Specs(p) {
			if s.Partitions != p {
				t.Errorf("Specs(%d): %s has %d", p, s.Name, s.Partitions)
			}
		}
	}
}

// TestSpecsTombstoneRetention: the changelog's tombstone window is the one
// asked for, its segments no longer than it, and no other topic changes.
func TestSpecsTombstoneRetention(t *testing.T) {
	n := topics.DefaultNames()
	plain := n.Specs(3)
	for _, c := range []struct {
		d                 time.Duration
		deletion, segment string
	}{
		{10 * time.Minute, "600000", "600000"},
		{60 * time.Second, "60000", "60000"},
		{time.Hour, "3600000", "3600000"},
		{3 * 24 * time.Hour, "259200000", "3600000"},
		{1500 * time.Microsecond, "1", "1"},
		{0, "86400000", "3600000"},                // the default
		{-time.Hour, "86400000", "3600000"},       // the default
		{time.Microsecond, "86400000", "3600000"}, // the default: no whole millisecond
	} {
		specs := n.Specs(3, topics.TombstoneRetention(c.d))
		if len(specs) != len(plain) {
			t.Fatalf("%v: %d specs, want %d", c.d, len(specs), len(plain))
		}
		for i, s := range specs {
			if s.Name != n.Changelog() {
				if !reflect.DeepEqual(s, plain[i]) {
					t.Errorf("%v: %s changed: %+v, want %+v", c.d, s.Name, s, plain[i])
				}
				continue
			}
			if got := s.Configs["delete.retention.ms"]; got != c.deletion {
				t.Errorf("%v: delete.retention.ms = %q, want %q", c.d, got, c.deletion)
			}
			if got := s.Configs["segment.ms"]; got != c.segment {
				t.Errorf("%v: segment.ms = %q, want %q", c.d, got, c.segment)
			}
			if s.Configs["cleanup.policy"] != "compact" || s.Configs["min.compaction.lag.ms"] != "60000" || len(s.Configs) != 4 {
				t.Errorf("%v: changelog configs %v", c.d, s.Configs)
			}
		}
	}
}

func TestSpecNamesAreKafkaTopicNames(t *testing.T) {
	for _, n := range []topics.Names{
		topics.DefaultNames(),
		{Prefix: strings.Repeat("p", 200), Version: math.MaxInt}, // the longest a valid Names makes
		{Prefix: "a", Version: 1},
	} {
		if err := n.Validate(); err != nil {
			t.Fatal(err)
		}
		for _, s := range n.Specs(1) {
			if !kafkaTopicName.MatchString(s.Name) || s.Name == "." || s.Name == ".." {
				t.Errorf("%q (%d bytes) is not a valid Kafka topic name", s.Name, len(s.Name))
			}
		}
	}
}
