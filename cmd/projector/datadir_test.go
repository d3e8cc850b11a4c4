package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestSecondProcessOnLockedDataDir: a second `projector run` on the data
// directory of a running one exits non-zero within a bounded time
// (projector.Config.LockWait, 10 s, plus start-up), saying the directory is
// locked and by which process; the first goes on. Before, the second
// retried for ever with "resource temporarily unavailable".
func TestSecondProcessOnLockedDataDir(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tmp, bin := buildProjector(ctx, t)
	b := brokertest.NewKfake(t)
	names, _ := freshTopics(ctx, t, b, "locked", 2)
	dir := filepath.Join(tmp, "data")
	start := func(name string) *child {
		c := &child{name: name, exited: make(chan struct{})}
		c.cmd = exec.Command(bin, "run", "-brokers", strings.Join(b.Addrs, ","), "-topic-prefix", names.Prefix,
			"-data-dir", dir, "-group", "g-"+names.Prefix, "-session-timeout", "2s", "-http-addr", "127.0.0.1:0")
		c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { c.err = c.cmd.Wait(); close(c.exited) }()
		t.Cleanup(c.kill)
		return c
	}
	first := start("first")
	for !strings.Contains(first.out.String(), "projector started") {
		select {
		case <-first.exited:
			t.Fatalf("the first instance exited: %v\n%s", first.err, first.out.String())
		case <-ctx.Done():
			t.Fatalf("the first instance did not start:\n%s", first.out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	second := start("second")
	select {
	case <-second.exited:
	case <-ctx.Done():
		t.Fatalf("the second instance on a locked data directory did not exit:\n%s", second.out.String())
	}
	out := second.out.String()
	if second.err == nil {
		t.Errorf("the second instance exited 0, want non-zero:\n%s", out)
	}
	if want := fmt.Sprintf("is locked by pid %d", first.cmd.Process.Pid); !strings.Contains(out, want) || !strings.Contains(out, dir) {
		t.Errorf("the second instance's output does not say %q of %s:\n%s", want, dir, out)
	}
	select {
	case <-first.exited:
		t.Fatalf("the first instance exited: %v\n%s", first.err, first.out.String())
	default:
	}
}

// buildProjector builds the projector binary (not race-built: the child is
// under test, not the harness) into a temporary directory of the test,
// which it returns too.
func buildProjector(ctx context.Context, t *testing.T) (tmp, bin string) {
	t.Helper()
	tmp = t.TempDir()
	bin = filepath.Join(tmp, "projector")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return tmp, bin
}

// freshTopics creates canopy's topics, of the test's own, on b, and
// returns them with a client (closed when the test ends) that produces to
// partitions it names.
func freshTopics(ctx context.Context, t *testing.T, b *brokertest.Broker, stem string, partitions int32) (topics.Names, *kgo.Client) {
	t.Helper()
	names := topics.Names{Prefix: b.Prefix(t, stem), Version: 1}
	cl, err := kgo.NewClient(append(b.Opts(), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if err := cluster.CreateTopics(ctx, kadm.NewClient(cl), names, partitions, 1); err != nil {
		t.Fatal(err)
	}
	return names, cl
}
