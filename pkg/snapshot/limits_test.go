package snapshot_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/pkg/snapshot"
	"github.com/canopy-dev/canopy/pkg/topics"
)

func TestLimitsDefaults(t *testing.T) {
	got := snapshot.Limits{}.WithDefaults()
	want := snapshot.Limits{MaxNodes: 64, MaxDedupeKeys: 3, MaxCorrelationHandles: 20, MaxBytes: 24000,
		MaxStringLength: 160, StaleAfter: 10 * time.Second}
	if got != want {
		t.Errorf("defaults %+v, want seed 000's %+v", got, want)
	}
	if err := (snapshot.Limits{}).Validate(); err != nil {
		t.Errorf("the zero Limits (all defaults): %v", err)
	}
	set := snapshot.Limits{MaxNodes: 5, MaxDedupeKeys: 1, MaxCorrelationHandles: 2, MaxBytes: 3000, MaxStringLength: 9, StaleAfter: time.Second}
	if got := set.WithDefaults(); got != set {
		t.Errorf("WithDefaults changed set fields: %+v", got)
	}
}

func TestLimitsValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits snapshot.Limits
		want   []string // every problem the error must name; none means valid
	}{
		{name: "lowest", limits: snapshot.Limits{MaxNodes: 1, MaxDedupeKeys: 1, MaxCorrelationHandles: 1, MaxBytes: snapshot.MinBytes, MaxStringLength: 8, StaleAfter: time.Nanosecond}},
		{name: "highest", limits: snapshot.Limits{MaxNodes: 10000, MaxDedupeKeys: 64, MaxCorrelationHandles: 1000, MaxBytes: 16 << 20, MaxStringLength: 4096, StaleAfter: 1 << 62}},
		{name: "nodes low", limits: snapshot.Limits{MaxNodes: -1}, want: []string{"max nodes -1"}},
		{name: "nodes high", limits: snapshot.Limits{MaxNodes: 10001}, want: []string{"max nodes 10001"}},
		{name: "dedupe low", limits: snapshot.Limits{MaxDedupeKeys: -1}, want: []string{"max dedupe keys -1"}},
		{name: "dedupe high", limits: snapshot.Limits{MaxDedupeKeys: 65}, want: []string{"max dedupe keys 65"}},
		{name: "handles low", limits: snapshot.Limits{MaxCorrelationHandles: -1}, want: []string{"max correlation handles -1"}},
		{name: "handles high", limits: snapshot.Limits{MaxCorrelationHandles: 1001}, want: []string{"max correlation handles 1001"}},
		{name: "bytes low", limits: snapshot.Limits{MaxBytes: snapshot.MinBytes - 1}, want: []string{"max bytes 2047"}},
		{name: "bytes negative", limits: snapshot.Limits{MaxBytes: -24000}, want: []string{"max bytes -24000"}},
		{name: "bytes high", limits: snapshot.Limits{MaxBytes: 16<<20 + 1}, want: []string{"max bytes 16777217"}},
		{name: "strings low", limits: snapshot.Limits{MaxStringLength: 7}, want: []string{"max string length 7"}},
		{name: "strings high", limits: snapshot.Limits{MaxStringLength: 4097}, want: []string{"max string length 4097"}},
		{name: "stale negative", limits: snapshot.Limits{StaleAfter: -time.Millisecond}, want: []string{"stale after -1ms"}},
		{
			name:   "all at once",
			limits: snapshot.Limits{MaxNodes: -5, MaxDedupeKeys: 99, MaxCorrelationHandles: -2, MaxBytes: 100, MaxStringLength: 1, StaleAfter: -time.Second},
			want:   []string{"max nodes -5", "max dedupe keys 99", "max correlation handles -2", "max bytes 100", "max string length 1", "stale after -1s"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.limits.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, snapshot.ErrInvalidLimits) {
				t.Fatalf("Validate = %v, want an error wrapping ErrInvalidLimits", err)
			}
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not name %q", msg, w)
				}
			}
			if n := strings.Count(msg, ";") + 1; n != len(tc.want) {
				t.Errorf("error %q names %d problems, want %d", msg, n, len(tc.want))
			}
			// Build refuses them too, before reading the tree.
			tree := &refTree{Run: "run", Nodes: []snapshot.Node{{AgentID: "a"}}, RootID: "a"}
			s, _, berr := snapshot.Build(tree, snapshot.Wake{}, tc.limits, fixedNow)
			if s != nil || !errors.Is(berr, snapshot.ErrInvalidLimits) {
				t.Errorf("Build = %v, %v; want ErrInvalidLimits", s, berr)
			}
			if len(tree.reads) != 0 {
				t.Errorf("Build read the tree with invalid limits: %v", tree.reads)
			}
		})
	}
}

// TestBuildReturnsEncodingErrors: a node or a clock the wire format cannot
// say (a time outside years 0000-9999) makes Build return an error wrapping
// ErrEncoding, with or without a cache, never panic: Build runs on the
// projector's worker goroutine.
func TestBuildReturnsEncodingErrors(t *testing.T) {
	far := topics.NewTime(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))
	for _, tc := range []struct {
		name string
		edit func(*refTree)
		now  time.Time
	}{
		{name: "root status time", edit: func(t *refTree) { t.Nodes[0].StatusUpdatedAt = far }},
		{name: "worker lease expiry", edit: func(t *refTree) { t.Nodes[2].LeaseOwner, t.Nodes[2].LeaseExpiresAt = "p", far }},
		{name: "worker signal time", edit: func(t *refTree) { t.Nodes[3].LastSignalAt = far }},
		{name: "wall clock", edit: func(*refTree) {}, now: far.Std()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := flatTree(5)
			tc.edit(tr)
			now := fixedNow
			if !tc.now.IsZero() {
				now = tc.now
			}
			for _, tree := range []snapshot.Tree{tr, newCachingTree(tr)} {
				s, info, err := snapshot.Build(tree, goldenWake(), snapshot.Limits{MaxBytes: snapshot.MinBytes}, now)
				if !errors.Is(err, snapshot.ErrEncoding) || s != nil || info.Encoded != nil {
					t.Errorf("%T: Build returned %v, %d bytes, %v; want ErrEncoding", tree, s, len(info.Encoded), err)
				}
			}
		})
	}
}
