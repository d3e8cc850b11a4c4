package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type events struct {
	mu  sync.Mutex
	log []string
}

func (e *events) add(s string) { e.mu.Lock(); e.log = append(e.log, s); e.mu.Unlock() }
func (e *events) get() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.log)
}

// watcher returns when its context ends; blocked returns only when
// stopped.
func watcher(e *events, name string) Actor {
	return Actor{Name: name, Run: func(ctx context.Context) error { <-ctx.Done(); e.add(name + " returned"); return nil }}
}

func blocked(e *events, name string) Actor {
	release := make(chan struct{})
	return Actor{
		Name: name,
		Run:  func(context.Context) error { <-release; e.add(name + " returned"); return nil },
		Stop: func() { e.add("stop " + name); close(release) },
	}
}

// TestFirstErrorEndsAllInOrder: when one actor fails, every other is
// stopped in the order added, each after the one before it returned (the
// context of a later one still live meanwhile), and the first error is
// returned, named.
func TestFirstErrorEndsAllInOrder(t *testing.T) {
	var e events
	boom := errors.New("boom")
	var g Group
	g.Add(watcher(&e, "a"))
	g.Add(blocked(&e, "http"))
	// c checks that it is still running when http has returned.
	g.Add(Actor{Name: "c", Run: func(ctx context.Context) error {
		<-ctx.Done()
		if l := e.get(); !slices.Contains(l, "http returned") {
			t.Errorf("c stopped before http returned: %v", l)
		}
		e.add("c returned")
		return nil
	}})
	g.Add(Actor{Name: "failing", Run: func(context.Context) error { return boom }})
	err := g.Run(context.Background())
	if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "failing: ") {
		t.Fatalf("Run: %v, want failing: boom", err)
	}
	if want := []string{"a returned", "stop http", "http returned", "c returned"}; !slices.Equal(e.get(), want) {
		t.Errorf("events %v, want %v", e.get(), want)
	}
}

// TestContextEndsAll: when the group's context ends, all stop, in order,
// and nothing is an error.
func TestContextEndsAll(t *testing.T) {
	var e events
	var g Group
	g.Add(watcher(&e, "a"))
	g.Add(blocked(&e, "http"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Run(ctx); err != nil {
		t.Fatalf("Run after ctx ended: %v", err)
	}
	if want := []string{"a returned", "stop http", "http returned"}; !slices.Equal(e.get(), want) {
		t.Errorf("events %v, want %v", e.get(), want)
	}
}

// TestFirstReturnEndsGroup: an actor returning nil ends the group too, and
// Run returns nil; a later actor's error (while stopping) is not lost when
// the first had none.
func TestFirstReturnEndsGroup(t *testing.T) {
	late := errors.New("late")
	var g Group
	g.Add(After(time.Millisecond))
	g.Add(Actor{Name: "late", Run: func(ctx context.Context) error { <-ctx.Done(); return late }})
	if err := g.Run(context.Background()); !errors.Is(err, late) {
		t.Fatalf("Run: %v, want late", err)
	}
}

// TestReadinessFirst: readiness is true while the group runs and false
// before any other actor is stopped.
func TestReadinessFirst(t *testing.T) {
	var r Readiness
	var g Group
	started := make(chan struct{})
	stop := make(chan struct{})
	g.Add(r.Actor())
	g.Add(Actor{Name: "worker", Run: func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		if r.Ready() {
			t.Error("worker stopped while still ready")
		}
		return nil
	}})
	g.Add(Actor{Name: "ender", Run: func(ctx context.Context) error {
		select {
		case <-stop:
		case <-ctx.Done():
		}
		return nil
	}})
	done := make(chan error, 1)
	go func() { done <- g.Run(context.Background()) }()
	<-started
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for !r.Ready() {
		select {
		case <-deadline:
			t.Fatal("never ready")
		case <-tick.C:
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if r.Ready() {
		t.Error("ready after the group stopped")
	}
}

// TestHTTPServer: a server actor serves until stopped, then shuts down
// gracefully; a closed listener is its error.
func TestHTTPServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })}
	var g Group
	served := make(chan struct{})
	g.Add(HTTPServer("api", srv, ln, time.Second))
	g.Add(Actor{Name: "client", Run: func(ctx context.Context) error {
		c := &http.Client{Transport: &http.Transport{}}
		defer c.CloseIdleConnections()
		resp, err := c.Get("http://" + ln.Addr().String())
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "ok" {
			return errors.New("got " + string(b))
		}
		close(served)
		return nil
	}})
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-served:
	default:
		t.Fatal("not served")
	}

	// A dead listener ends the group with its error.
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln2.Close()
	var g2 Group
	g2.Add(Signals())
	g2.Add(HTTPServer("metrics", &http.Server{}, ln2, time.Second))
	if err := g2.Run(context.Background()); err == nil || !strings.HasPrefix(err.Error(), "metrics: ") {
		t.Fatalf("Run with a closed listener: %v, want a metrics error", err)
	}
}

// TestSignals runs this test binary as a child that waits in a group with
// the signal actor, sends it SIGTERM and expects a clean exit with the
// stop logged in order.
func TestSignals(t *testing.T) {
	if os.Getenv("LIFECYCLE_CHILD") == "1" {
		var g Group
		g.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
		g.Add(Signals())
		g.Add(Actor{Name: "worker", Run: func(ctx context.Context) error {
			os.Stdout.WriteString("running\n")
			<-ctx.Done()
			return nil
		}})
		if err := g.Run(context.Background()); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSignals$")
	cmd.Env = append(os.Environ(), "LIFECYCLE_CHILD=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	buf := make([]byte, len("running\n"))
	if _, err := io.ReadFull(out, buf); err != nil {
		t.Fatalf("child: %v", err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child on SIGTERM: %v\n%s", err, stderr.String())
	}
	log := stderr.String()
	i, j := strings.Index(log, "received signal terminated"), strings.Index(log, "actor=worker")
	if i < 0 || j < i {
		t.Fatalf("log does not show the signal, then the worker stopped:\n%s", log)
	}
}
