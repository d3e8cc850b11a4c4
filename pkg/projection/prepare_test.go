package projection

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestPrepareBetween holds PrepareBetween to its promise: an event applied
// between two runs of a commit being gathered goes with the next commit,
// wherever it falls (before its run is gathered, after, or into a run the
// commit does not hold yet). Each commit must hold exactly what a Prepare
// without it holds (the state its offsets reach), and the next commit the
// event's changes, as if the event came after the first commit.
func TestPrepareBetween(t *testing.T) {
	runs := []string{"run-a", "run-b", "run-c", "run-d"}
	var first []topics.Event
	late := map[string]topics.Event{} // a run's event applied during the commit
	for i, id := range runs {
		evs := workload.Generate(workload.Spec{RunID: id, Nodes: 12, Seed: uint64(i + 1), Step: time.Second, Activity: i == 1})
		first = append(first, evs[:len(evs)-1]...)
		late[id] = evs[len(evs)-1]
	}
	// A run that is not in memory when the commit begins.
	late["run-new"] = workload.Generate(workload.Spec{RunID: "run-new", Nodes: 3, Seed: 9, Step: time.Second})[0]
	cfg := Config{}
	off1 := map[string]int64{"agent-events": int64(len(first))}
	off2 := map[string]int64{"agent-events": int64(len(first)), "human-input": 1}

	// asMap is a commit's changes by key: their order is the runs' map
	// order, which says nothing.
	asMap := func(c Changes) map[string]string {
		m := make(map[string]string, len(c))
		for _, ch := range c {
			v := "value:" + string(ch.Value)
			if ch.Delete {
				v = "delete"
			}
			m[string(ch.Key)] = v
		}
		return m
	}
	open := func(t *testing.T) (*Projection, *memStorage) {
		t.Helper()
		db := newMemStorage()
		p, err := Open(cfg, db)
		if err != nil {
			t.Fatal(err)
		}
		for i := range first {
			ev := first[i]
			if _, _, err := p.ApplyEvent(&ev); err != nil {
				t.Fatal(err)
			}
		}
		return p, db
	}
	commit := func(t *testing.T, p *Projection, prepare func() (Changes, error)) map[string]string {
		t.Helper()
		c, err := prepare()
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Committed(p.Write(c, nil)); err != nil {
			t.Fatal(err)
		}
		return asMap(c)
	}

	for _, target := range append(runs, "run-new") {
		ev := late[target]
		// The reference: the event after the first commit.
		ref, refDB := open(t)
		want1 := commit(t, ref, func() (Changes, error) { return ref.PrepareBetween(maps.Clone(off1), nil) })
		if _, _, err := ref.ApplyEvent(&ev); err != nil {
			t.Fatal(err)
		}
		want2 := commit(t, ref, func() (Changes, error) { return ref.Prepare(off2) })
		if len(want2) < 2 {
			t.Fatalf("%s: the late event changes nothing (%d changes): the test proves nothing", target, len(want2))
		}
		for at := range len(runs) {
			t.Run(fmt.Sprintf("%s/after-%d-runs", target, at), func(t *testing.T) {
				p, db := open(t)
				calls := 0
				got1 := commit(t, p, func() (Changes, error) {
					return p.PrepareBetween(maps.Clone(off1), func() {
						if calls == at {
							ev := late[target]
							if _, _, err := p.ApplyEvent(&ev); err != nil {
								t.Fatal(err)
							}
						}
						calls++
					})
				})
				if calls <= at {
					t.Fatalf("between was called %d times: the event was not applied during the commit", calls)
				}
				if !maps.Equal(got1, want1) {
					t.Errorf("the commit being gathered holds the event applied meanwhile:\n%s", mapDiff(got1, want1))
				}
				got2 := commit(t, p, func() (Changes, error) { return p.Prepare(off2) })
				if !maps.Equal(got2, want2) {
					t.Errorf("the next commit does not hold exactly the event's changes:\n%s", mapDiff(got2, want2))
				}
				if !maps.EqualFunc(db.m, refDB.m, func(a, b []byte) bool { return string(a) == string(b) }) {
					t.Error("the store after both commits differs from the reference's")
				}
			})
		}
	}
}

// mapDiff says which keys two commits' changes differ in.
func mapDiff(got, want map[string]string) string {
	var s string
	for k, v := range got {
		if w, ok := want[k]; !ok {
			s += fmt.Sprintf("  extra %q\n", k)
		} else if w != v {
			s += fmt.Sprintf("  differs %q\n", k)
		}
	}
	for k := range want {
		if _, ok := got[k]; !ok {
			s += fmt.Sprintf("  missing %q\n", k)
		}
	}
	return s
}
