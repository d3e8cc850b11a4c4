// Package lifecycle runs the long-running parts of a canopy process (a
// projector, an HTTP server, a signal handler) as one group of actors and
// stops them in one stated order. It is oklog/run's shape, as Prometheus's
// main uses it, made stricter: instead of interrupting every actor at once
// and waiting for all at the end, the group stops each actor and waits for
// it to return before it stops the next, so that the order the actors were
// added in is the shutdown order, written once in each command's wiring.
//
// canopy's commands add their actors in this order, and so stop them so:
//
//  1. the signal handler and readiness (Readiness): /readyz says "not
//     ready" before anything else stops, so that load balancers send no
//     new requests while the rest drains;
//  2. servers facing clients (the gateway's API), so that no request is
//     left waiting on a part that already stopped;
//  3. the work (the projector finishes its batch, commits, leaves its
//     group; the demo workload);
//  4. internal endpoints last (the projector's query endpoint and every
//     /metrics): readers are answered and metrics scraped until the end.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
)

// Actor is one long-running part of a process. Run runs it until its
// context ends or it fails; Stop, when set, makes a Run that does not watch
// its context return (an http.Server's Shutdown).
type Actor struct {
	// Name names the actor in the group's logs and errors.
	Name string
	// Run runs the actor until ctx ends, the actor's own interrupt.
	Run func(ctx context.Context) error
	// Stop, when set, is called after the actor's context is cancelled,
	// for a Run that does not watch it. It must make Run return.
	Stop func()
}

// Group is a set of actors started together and stopped together: the
// first to return ends the group.
type Group struct {
	// Logger receives one line as the group starts to stop (which actor
	// returned first, and its error) and one per actor stopped, in order.
	// Default: nothing is logged.
	Logger *slog.Logger
	actors []Actor
}

// Add adds a to the group. Actors stop in the order they are added.
func (g *Group) Add(a Actor) { g.actors = append(g.actors, a) }

// SignalError is the error of the signal actor (Signals) that ended a
// group. Run does not return it: a signal is the ordinary way to stop.
type SignalError struct{ Signal os.Signal }

func (e SignalError) Error() string { return "received signal " + e.Signal.String() }

// Run starts every actor, each with a context of its own (carrying ctx's
// values, not its cancellation), and waits until ctx ends or any actor
// returns. Then it stops the actors in the order they were added: it
// cancels the next actor's context, calls its Stop if it has one, and waits
// for its Run to return before going on. It returns the error of the first
// actor that returned, wrapped with its name; nil when ctx ended, when that
// actor returned nil, or when it was the signal actor.
func (g *Group) Run(ctx context.Context) error {
	log := g.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	type result struct {
		i   int
		err error
	}
	done := make(chan result, len(g.actors))
	cancels := make([]context.CancelFunc, len(g.actors))
	base := context.WithoutCancel(ctx)
	for i, a := range g.actors {
		actx, cancel := context.WithCancel(base)
		cancels[i] = cancel
		go func() { done <- result{i, a.Run(actx)} }()
	}
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	var first error
	returned := make([]bool, len(g.actors))
	note := func(r result) {
		returned[r.i] = true
		if r.err != nil && first == nil {
			first = fmt.Errorf("%s: %w", g.actors[r.i].Name, r.err)
		}
	}
	select {
	case <-ctx.Done():
		log.Info("stopping", "cause", context.Cause(ctx))
	case r := <-done:
		note(r)
		if r.err != nil {
			log.Info("stopping", "cause", g.actors[r.i].Name, "err", r.err)
		} else {
			log.Info("stopping", "cause", g.actors[r.i].Name+" returned")
		}
	}
	for i, a := range g.actors {
		if !returned[i] {
			start := time.Now()
			cancels[i]()
			if a.Stop != nil {
				a.Stop()
			}
			for !returned[i] {
				note(<-done)
			}
			log.Info("stopped", "actor", a.Name, "took", time.Since(start).Round(time.Millisecond))
		}
	}
	if _, ok := errors.AsType[SignalError](first); ok {
		return nil
	}
	return first
}

// Signals is an actor that returns a SignalError when the process receives
// SIGINT or SIGTERM, ending its group, and nil when its context ends. The
// signals are caught from the call on, not only once the group runs, so
// that one arriving while the process starts up still stops it gracefully;
// the actor must then be run.
func Signals() Actor {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
	return Actor{Name: "signal", Run: func(ctx context.Context) error {
		defer signal.Stop(c)
		select {
		case s := <-c:
			return SignalError{s}
		case <-ctx.Done():
			return nil
		}
	}}
}

// After is an actor that ends its group after d, for a command that runs
// for a set time.
func After(d time.Duration) Actor {
	return Actor{Name: "timer", Run: func(ctx context.Context) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		return nil
	}}
}

// Readiness is the process's readiness as /readyz reports it: false until
// its actor runs, and false again as soon as that actor is stopped. Added
// first to a group, it is the first interrupt, so that a process stops
// taking new work before any part of it stops.
type Readiness struct{ ready atomic.Bool }

// Ready reports whether the process is up and not shutting down.
func (r *Readiness) Ready() bool { return r.ready.Load() }

// Actor is r's actor: ready while it runs.
func (r *Readiness) Actor() Actor {
	return Actor{Name: "readiness", Run: func(ctx context.Context) error {
		r.ready.Store(true)
		<-ctx.Done()
		r.ready.Store(false)
		return nil
	}}
}
