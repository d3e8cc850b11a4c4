package topics

import (
	"strings"
	"testing"
	"unsafe"
)

func TestIntern(t *testing.T) {
	n := 0
	for _, s := range interned.slots {
		if s == "" {
			continue
		}
		n++
		got := intern([]byte(s))
		if got != s || unsafe.StringData(got) != unsafe.StringData(s) {
			t.Errorf("intern(%q) is not the shared copy", s)
		}
	}
	if n < 100 || n > internSlots/4 {
		t.Errorf("interned holds %d strings; want the names and enum values, at most a quarter of its %d slots", n, internSlots)
	}
	// Two decodes of a name or an enum value share one string.
	for _, s := range []string{attrRunID, string(TypeNodeStatus), string(StatusRunning), "parent_agent_id", SpecVersion} {
		a, b := intern([]byte(s)), intern([]byte(s))
		if unsafe.StringData(a) != unsafe.StringData(b) {
			t.Errorf("%q is not interned", s)
		}
	}
	for _, s := range []string{"", "r", "run-thousand", "01KHDSFJE8NW70TDP895PVFZQN", strings.Repeat("x", maxInterned+1)} {
		if got := intern([]byte(s)); got != s {
			t.Errorf("intern(%q) = %q", s, got)
		}
	}
}
