package projectortest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KeepVar names the variable that, set to a directory, makes CheckState
// write there the whole changelog partition of every partition it found
// wrong: each record with its producer id, epoch and fate (committed,
// aborted, or a transaction marker), so that a rare mismatch in a chaos
// run can be traced to the transaction that wrote, or failed to write, a
// key. Unset, nothing is written.
const KeepVar = "CANOPY_TEST_KEEP"

// maxTimelineLines bounds the changelog timeline a mismatch logs.
const maxTimelineLines = 400

// timeline returns partition part of topic as runs of records that share a
// producer, an epoch and a fate, a line each with their offsets, count and
// first and last keys, markers included: compact enough for a test's log
// (a mismatch seen once, in CI, must carry its evidence), and enough to see
// commits of two producers interleave or a fenced epoch come back. At most
// maxTimelineLines lines: the last ones, where a mismatch is likelier.
func timeline(ctx context.Context, opts []kgo.Opt, topic string, part int32) ([]string, error) {
	type span struct {
		first, last       int64
		pid               int64
		epoch             int16
		fate              string
		n                 int
		firstKey, lastKey string
	}
	var spans []span
	err := eachWithFate(ctx, opts, topic, part, func(r *kgo.Record, fate string) {
		key := fmt.Sprintf("%q", r.Key)
		if len(key) > 60 {
			key = key[:60] + "…"
		}
		if n := len(spans); n > 0 && fate != "marker" && spans[n-1].fate == fate && spans[n-1].pid == r.ProducerID && spans[n-1].epoch == r.ProducerEpoch {
			s := &spans[n-1]
			s.last, s.n, s.lastKey = r.Offset, s.n+1, key
			return
		}
		spans = append(spans, span{first: r.Offset, last: r.Offset, pid: r.ProducerID, epoch: r.ProducerEpoch, fate: fate, n: 1, firstKey: key, lastKey: key})
	})
	if err != nil {
		return nil, err
	}
	lines := make([]string, 0, len(spans))
	for _, s := range spans {
		lines = append(lines, fmt.Sprintf("%d-%d pid %d epoch %d %s n=%d %s..%s", s.first, s.last, s.pid, s.epoch, s.fate, s.n, s.firstKey, s.lastKey))
	}
	if len(lines) > maxTimelineLines {
		lines = append([]string{fmt.Sprintf("(the first %d lines left out)", len(lines)-maxTimelineLines)}, lines[len(lines)-maxTimelineLines:]...)
	}
	return lines, nil
}

// dumpChangelog writes partition part of topic as described at KeepVar to
// a file under dir, and returns its path.
func dumpChangelog(ctx context.Context, opts []kgo.Opt, topic string, part int32, dir, name string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-changelog-%d.txt", sanitize(name), part))
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	fmt.Fprintf(w, "# %s partition %d: offset pid epoch fate key (value bytes)\n", topic, part)
	err = eachWithFate(ctx, opts, topic, part, func(r *kgo.Record, fate string) {
		key := r.Key
		if len(key) > 120 {
			key = key[:120]
		}
		fmt.Fprintf(w, "%d %d %d %s %q (%d)\n", r.Offset, r.ProducerID, r.ProducerEpoch, fate, key, len(r.Value))
	})
	if err != nil {
		return "", err
	}
	return path, w.Flush()
}

// eachWithFate calls fn with every record of the partition, control
// records included, and its fate: committed, aborted or marker.
func eachWithFate(ctx context.Context, opts []kgo.Opt, topic string, part int32, fn func(r *kgo.Record, fate string)) error {
	committed := map[int64]bool{}
	if err := readPartition(ctx, opts, topic, part, kgo.ReadCommitted(), func(r *kgo.Record) { committed[r.Offset] = true }); err != nil {
		return err
	}
	return readPartition(ctx, opts, topic, part, kgo.ReadUncommitted(), func(r *kgo.Record) {
		switch {
		case r.Attrs.IsControl():
			fn(r, "marker")
		case committed[r.Offset]:
			fn(r, "committed")
		default:
			fn(r, "aborted")
		}
	})
}

// readPartition calls fn with every record of the partition from its start
// to its end (the high watermark for read_uncommitted, the last stable
// offset for read_committed) as listed when it is called, control records
// included.
func readPartition(ctx context.Context, opts []kgo.Opt, topic string, part int32, iso kgo.IsolationLevel, fn func(*kgo.Record)) error {
	cl, err := kgo.NewClient(append(slices.Clip(opts),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {part: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(iso), kgo.KeepControlRecords())...)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var ends kadm.ListedOffsets
	if iso == kgo.ReadCommitted() {
		ends, err = adm.ListCommittedOffsets(ctx, topic)
	} else {
		ends, err = adm.ListEndOffsets(ctx, topic)
	}
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return err
	}
	end, _ := ends.Lookup(topic, part)
	for next := int64(0); next < end.Offset; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fs.Err0(); err != nil {
			return err
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < end.Offset {
				fn(r)
			}
			next = r.Offset + 1
		})
	}
	return nil
}

// sanitize makes a test's name a file name.
func sanitize(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}
