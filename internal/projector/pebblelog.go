package projector

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
)

// pebbleLogger routes Pebble's log lines to the projector's logger: its
// routine messages at debug level, its errors as errors.
type pebbleLogger struct{ log *slog.Logger }

func (l pebbleLogger) Infof(format string, args ...any) {
	l.log.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

// Fatalf is Pebble's report of a broken invariant of its own: it cannot go
// on, and neither can the projector. Pebble's default logger exits too.
func (l pebbleLogger) Fatalf(format string, args ...any) {
	l.log.Error(fmt.Sprintf(format, args...), "component", "pebble", "fatal", true)
	os.Exit(70)
}

// defaultMemTableSize is the default size of each of Pebble's memtables (at
// most two are in memory). Every event writes a few keys, and history
// entries are deleted soon after they are written: with Pebble's default of
// 4 MB a busy projector flushed many small L0 tables a second and spent a
// fifth of its CPU compacting them. 32 MB took BenchmarkProjector from 105k
// to 121k events/s; 64 MB added nothing more.
const defaultMemTableSize = 32 << 20

// pebbleOptions are the projector's Pebble settings: its logger, memtables
// of memTableSize bytes, and bloom filters on every level, because most
// lookups (is this event id applied?) are for keys that do not exist.
func pebbleOptions(log *slog.Logger, memTableSize int) *pebble.Options {
	o := &pebble.Options{Logger: pebbleLogger{log}, MemTableSize: uint64(memTableSize)}
	for i := range o.Levels {
		o.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	return o
}
