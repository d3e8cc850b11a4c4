package main

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
)

// TestRunActors: when one actor fails, every other is stopped, in order,
// each after the one before it returned, and the first error is returned;
// when the context ends, all stop and nothing is an error.
func TestRunActors(t *testing.T) {
	var mu sync.Mutex
	var events []string
	log := func(s string) { mu.Lock(); events = append(events, s); mu.Unlock() }
	blocked := func(name string) actor {
		release := make(chan struct{})
		return actor{
			name:  name,
			start: func(context.Context) error { <-release; log(name + " returned"); return nil },
			stop:  func() { log("stop " + name); close(release) },
		}
	}
	watcher := actor{name: "watcher", start: func(ctx context.Context) error { <-ctx.Done(); log("watcher returned"); return nil }}
	boom := errors.New("boom")
	failing := actor{name: "failing", start: func(context.Context) error { return boom }}

	err := runActors(context.Background(), []actor{watcher, blocked("http"), failing})
	if !errors.Is(err, boom) {
		t.Fatalf("runActors: %v, want boom", err)
	}
	if want := []string{"watcher returned", "stop http", "http returned"}; !slices.Equal(events, want) {
		t.Errorf("events %v, want %v", events, want)
	}

	events = nil
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := runActors(ctx, []actor{watcher, blocked("http")}); err != nil {
		t.Fatalf("runActors after ctx ended: %v", err)
	}
	if want := []string{"watcher returned", "stop http", "http returned"}; !slices.Equal(events, want) {
		t.Errorf("events %v, want %v", events, want)
	}
}
