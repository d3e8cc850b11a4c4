package main

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestPausedInstanceRefusesReads: an instance frozen (SIGSTOP) for longer
// than its session timeout may have lost its partitions to another owner;
// thawed (SIGCONT), it must not answer reads from what may be stale state
// until the group has confirmed what it owns: the first read after the
// thaw is refused (503 with Retry-After, or 421 once it knows it lost the
// partition), and reads come back once the group has answered.
// Before, it answered from its old state (the liveness issue's finding 3).
func TestPausedInstanceRefusesReads(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tmp, bin := buildProjector(ctx, t)
	b := brokertest.NewKfake(t)
	names, cl := freshTopics(ctx, t, b, "paused", 2)
	evs := workload.Generate(workload.Spec{RunID: "run-paused", Nodes: 10, Seed: 9})
	for i := range evs {
		r, err := topics.EventRecord(names.AgentEvents(), &evs[i], "")
		if err != nil {
			t.Fatal(err)
		}
		r.Partition = topics.Partition(r.Key, 2)
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	addr := testenv.FreeAddr(t)
	c := &child{name: "paused", exited: make(chan struct{})}
	c.cmd = exec.Command(bin, "run", "-brokers", strings.Join(b.Addrs, ","), "-topic-prefix", names.Prefix,
		"-data-dir", filepath.Join(tmp, "data"), "-group", "g-"+names.Prefix, "-session-timeout", "2s", "-http-addr", addr)
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.err = c.cmd.Wait(); close(c.exited) }()
	defer c.kill()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	get := func() (int, string) {
		resp, err := client.Get("http://" + addr + "/internal/v1/runs/run-paused/snapshot")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Retry-After") + " " + string(body)
	}
	until := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-ctx.Done():
				t.Fatalf("%s: not in time; output:\n%s", what, c.out.String())
			case <-c.exited:
				t.Fatalf("the instance exited: %v\n%s", c.err, c.out.String())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	until("the run's snapshot served", func() bool { code, _ := get(); return code == http.StatusOK })

	if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.NewTimer(4 * time.Second) // twice the session timeout: a deliberate freeze
	<-frozen.C
	if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// Refused either way: 503 while the group has not answered yet, or 421
	// once the instance has learnt it lost the partition (which can come
	// first on a busy machine). Never a 200 from what may be stale state.
	switch code, body := get(); {
	case code == http.StatusServiceUnavailable:
		if strings.HasPrefix(body, " ") || !strings.Contains(body, "paused") {
			t.Errorf("the first read after a 4 s freeze: 503 %.300q, want Retry-After and why", body)
		}
	case code == http.StatusMisdirectedRequest:
	default:
		t.Errorf("the first read after a 4 s freeze: %d %.300q, want 503 (paused) or 421 (no longer the owner)", code, body)
	}
	until("reads served again once the group answered", func() bool { code, _ := get(); return code == http.StatusOK })
}
