package projector

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestLockedDataDir: a second instance on a data directory that a running
// one holds is told so, with the holder's details, and gives up after
// LockWait rather than retrying for ever (a supervisor restarts it).
// Before, it retried every 30 s with "opening state in ...: resource
// temporarily unavailable", never saying why and never exiting.
func TestLockedDataDir(t *testing.T) {
	e := newEnv(t, 2)
	dir := t.TempDir()
	e.start(e.config(dir))

	second := e.config(dir)
	second.LockWait = 500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := NewSupervisor(second)
	if err != nil {
		t.Fatal(err)
	}
	s.started = func(*Projector) { t.Error("a second instance started on a locked data directory") }
	err = s.Run(ctx)
	if ctx.Err() != nil {
		t.Fatalf("Supervisor.Run did not give up on a locked data directory within 60s")
	}
	var locked *LockedError
	if !errors.Is(err, ErrDataDirLocked) || !errors.As(err, &locked) {
		t.Fatalf("Supervisor.Run = %v, want ErrDataDirLocked", err)
	}
	if want := fmt.Sprintf("pid %d", os.Getpid()); !strings.Contains(locked.Holder, want) || !strings.Contains(err.Error(), dir) {
		t.Errorf("error %q: want the directory and the holder (%s)", err, want)
	}
	t.Logf("%v", err)
}
