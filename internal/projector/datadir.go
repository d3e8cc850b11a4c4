package projector

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// ErrDataDirLocked is wrapped by the error of New when another process holds
// the data directory's state open: two projectors must never share one.
// The error is a *LockedError saying who holds it, when known.
var ErrDataDirLocked = errors.New("projector: the data directory is in use by another process")

// LockedError says which data directory is locked and by whom.
type LockedError struct {
	Dir string
	// Holder is what the holder wrote when it opened the directory
	// (process id, host, start time, group), or empty if it wrote nothing.
	Holder string
}

func (e *LockedError) Error() string {
	holder := "a process that left no details (an older canopy, or not canopy)"
	if e.Holder != "" {
		holder = e.Holder
	}
	return fmt.Sprintf("%v: %s is locked by %s; stop it, or give this instance its own -data-dir", ErrDataDirLocked, e.Dir, holder)
}

func (e *LockedError) Unwrap() error { return ErrDataDirLocked }

// holderFile is where the process that holds a data directory says who it
// is, for the next one that finds it locked.
const holderFile = "holder"

// openState opens the Pebble state in cfg.DataDir. Pebble takes an
// exclusive lock on it (fcntl F_SETLK), which a second process fails to
// take with EAGAIN or EACCES ("resource temporarily unavailable"): that
// becomes a *LockedError naming the holder. Once open, this process writes
// its own details for the next one.
func openState(cfg Config, now time.Time) (*pebble.DB, error) {
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("projector: data dir: %w", err)
	}
	// The lock is tried first on its own: a pebble.Open that fails on it
	// leaves its disk-health goroutine behind, once per attempt.
	lock, err := vfs.Default.Lock(filepath.Join(cfg.DataDir, "pebble", "LOCK"))
	switch {
	case lockedByOther(err):
		holder, _ := os.ReadFile(filepath.Join(cfg.DataDir, holderFile))
		return nil, &LockedError{Dir: cfg.DataDir, Holder: strings.TrimSpace(string(holder))}
	case err == nil:
		_ = lock.Close()
	}
	db, err := pebble.Open(filepath.Join(cfg.DataDir, "pebble"), pebbleOptions(cfg.Logger, cfg.MemTableSize))
	if lockedByOther(err) { // taken in the meantime
		holder, _ := os.ReadFile(filepath.Join(cfg.DataDir, holderFile))
		return nil, &LockedError{Dir: cfg.DataDir, Holder: strings.TrimSpace(string(holder))}
	}
	if err != nil {
		return nil, fmt.Errorf("projector: opening state in %s: %w", cfg.DataDir, err)
	}
	host, _ := os.Hostname()
	details := fmt.Sprintf("pid %d on host %s, started %s, group %s\n", os.Getpid(), host, now.UTC().Format(time.RFC3339), cfg.Group)
	if err := os.WriteFile(filepath.Join(cfg.DataDir, holderFile), []byte(details), 0o644); err != nil {
		cfg.Logger.Warn("could not note this process as the data directory's holder", "err", err)
	}
	return db, nil
}

// lockedByOther reports whether Pebble's Open failed on its directory
// lock: EAGAIN or EACCES from another process's lock (POSIX lets fcntl
// answer either), or, within one process, Pebble's own "lock held by
// current process" (a plain error, so its text is all there is to match).
func lockedByOther(err error) bool {
	return err != nil && (errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) ||
		strings.Contains(err.Error(), "lock held by current process"))
}
