package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/canopy-dev/canopy/internal/store"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/projection"
)

// BenchmarkSessionScan measures what finding a session's runs costs a
// partition of 10,000 runs on Pebble, none in memory (reopened): "first"
// is a projection's first session read, which indexes the runs by session
// with a skip-scan of every run's meta record (as Runs lists them);
// "indexed" the reads after it; "named" a read of only the runs a reader
// names (SessionQuery.Only). The page is one run and no history, so that
// finding the runs dominates. docs/ARCHITECTURE.md "Session snapshot"
// records the numbers and the decision they led to.
//
//	go test -run '^$' -bench SessionScan -benchtime 20x ./internal/store/
func BenchmarkSessionScan(b *testing.B) {
	const runs, sessions = 10_000, 100
	dir := b.TempDir()
	open := func() (*pebble.DB, *projection.Projection) {
		db, err := pebble.Open(dir, &pebble.Options{})
		if err != nil {
			b.Fatal(err)
		}
		p, err := projection.Open(projection.Config{}, store.New(db, 0))
		if err != nil {
			b.Fatal(err)
		}
		return db, p
	}
	db, p := open()
	start := time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC)
	for i := range runs {
		evs := workload.Generate(workload.Spec{RunID: fmt.Sprintf("run-%05d", i), SessionID: fmt.Sprintf("s-%d", i%sessions),
			ThreadID: fmt.Sprintf("t-%d", i%7), Nodes: 3, Start: start.Add(time.Duration(i) * time.Second), Seed: uint64(i), Activity: true})
		for j := range evs {
			p.Apply(&evs[j])
		}
		if i%500 == 499 {
			if err := p.Commit(map[string]int64{"t": int64(i)}); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := p.Commit(map[string]int64{"t": runs}); err != nil {
		b.Fatal(err)
	}
	if err := db.Close(); err != nil {
		b.Fatal(err)
	}
	db, _ = open()
	b.Cleanup(func() { db.Close() })
	only := make([]string, 0, runs/sessions)
	for i := 7; i < runs; i += sessions {
		only = append(only, fmt.Sprintf("run-%05d", i))
	}
	reopen := func() *projection.Projection {
		p, err := projection.Open(projection.Config{}, store.New(db, 0))
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	read := func(b *testing.B, p *projection.Projection, q projection.SessionQuery) {
		part, err := p.Session(q, false)
		if err != nil {
			b.Fatal(err)
		}
		if part.RunsTotal != runs/sessions {
			b.Fatalf("%d runs, want %d", part.RunsTotal, runs/sessions)
		}
	}
	q := projection.SessionQuery{SessionID: "s-7", Limit: 1}
	b.Run("first", func(b *testing.B) {
		for b.Loop() {
			read(b, reopen(), q)
		}
	})
	b.Run("indexed", func(b *testing.B) {
		p := reopen()
		read(b, p, q)
		for b.Loop() {
			read(b, p, q)
		}
	})
	b.Run("named", func(b *testing.B) {
		p := reopen()
		named := q
		named.Only = only
		for b.Loop() {
			read(b, p, named)
		}
	})
}
