package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// wakeInfo is what the harness needs of a wake.
type wakeInfo struct {
	RunID    string
	Lane     topics.Lane
	Triggers []wakeTrigger
	// Seq is the snapshot's as_of_event_seq: the run's events projected.
	Seq int64
	// SnapshotBytes is the size of the encoded agent_tree_snapshot.
	SnapshotBytes int
	Truncated     bool
	// Nodes is the snapshot's summary.node_count_total.
	Nodes int
}

type wakeTrigger struct {
	Kind    topics.TriggerKind `json:"kind"`
	EventID *string            `json:"event_id"`
	At      topics.Time        `json:"at"`
	Input   *struct {
		Text string `json:"text"`
	} `json:"input"`
}

// decodeWake reads the fields the harness needs from a wake without
// decoding its snapshot's nodes: the reader must not take the CPU the
// projectors under test need (a full strict decode of a 24 KB snapshot per
// wake would). The wake's field order is the encoder's (pkg/topics.Wake):
// triggers before the snapshot, as_of_event_seq early in it, the summary and
// truncation flag after the nodes.
func decodeWake(b []byte) (*wakeInfo, error) {
	w := &wakeInfo{}
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("wake: not a JSON object")
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("wake: %w", err)
		}
		switch tok {
		case "run_id":
			err = dec.Decode(&w.RunID)
		case "lane":
			err = dec.Decode(&w.Lane)
		case "triggers":
			err = dec.Decode(&w.Triggers)
		case "agent_tree_snapshot":
			w.SnapshotBytes = len(b) - int(dec.InputOffset()) - 2 // the colon after the key, the wake's closing brace
			err = decodeSnapshotHead(dec, w)
			if err == nil {
				w.Truncated, err = boolAfter(b, `"truncated":`)
			}
			if err == nil {
				w.Nodes, err = intAfter(b, `"node_count_total":`)
			}
			if err != nil {
				return nil, fmt.Errorf("wake: agent_tree_snapshot: %w", err)
			}
			if w.RunID == "" {
				return nil, errors.New("wake: no run_id before the snapshot")
			}
			return w, nil
		default:
			var skip json.RawMessage
			err = dec.Decode(&skip)
		}
		if err != nil {
			return nil, fmt.Errorf("wake: %v: %w", tok, err)
		}
	}
	return nil, errors.New("wake: no agent_tree_snapshot")
}

// decodeSnapshotHead reads as_of_event_seq from the snapshot's first fields.
func decodeSnapshotHead(dec *json.Decoder, w *wakeInfo) error {
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return errors.New("not a JSON object")
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if tok == "as_of_event_seq" {
			return dec.Decode(&w.Seq)
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return err
		}
	}
	return errors.New("no as_of_event_seq")
}

// boolAfter and intAfter read the value of the last occurrence of key in b
// (the snapshot's summary and flags follow its nodes, whose fields have
// other names).
func boolAfter(b []byte, key string) (bool, error) {
	i := bytes.LastIndex(b, []byte(key))
	if i < 0 {
		return false, fmt.Errorf("no %s", key)
	}
	return bytes.HasPrefix(b[i+len(key):], []byte("true")), nil
}

func intAfter(b []byte, key string) (int, error) {
	i := bytes.LastIndex(b, []byte(key))
	if i < 0 {
		return 0, fmt.Errorf("no %s", key)
	}
	rest := b[i+len(key):]
	j := bytes.IndexAny(rest, ",}")
	if j < 0 {
		return 0, fmt.Errorf("%s: no end", key)
	}
	return strconv.Atoi(strings.TrimSpace(string(rest[:j])))
}

// humanTag starts the text of every human input the harness sends, followed
// by its number: the wake's trigger carries the text, so the input is
// matched to its wake without waiting for the gateway's answer.
const humanTag = "bench-input-"

// wakeReader reads both wake topics with read_committed, as a conductor
// does, and matches every wake to the events it was raised for.
type wakeReader struct {
	cl *kgo.Client
	tr *tracker

	mu        sync.Mutex
	wakes     [2]int64
	truncated int64
	snapBytes *hdrhistogram.Histogram
	seq       map[string]int64 // the highest as_of_event_seq seen per run
	projected int64            // the sum of seq: events projected, as the wakes show
	markers   map[string]bool  // runs whose marker's wake was read
	// onWake, when set, is called for every wake under mu.
	onWake func(w *wakeInfo, r *kgo.Record, at time.Time)
	err    error

	changed chan struct{} // signalled (without blocking) after each fetch
	stop    context.CancelFunc
	done    chan struct{}
	polled  atomic.Int64
}

func newWakeReader(opts []kgo.Opt, names topics.Names, tr *tracker, onWake func(*wakeInfo, *kgo.Record, time.Time)) (*wakeReader, error) {
	cl, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(names.Wakes(), names.PriorityWakes()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// A short fetch wait: the broker answers a fetch as soon as data
		// is there, but whether kfake does so when a transaction commits,
		// rather than at the wait's end, is not the projector's latency.
		kgo.FetchMaxWait(20*time.Millisecond))...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &wakeReader{cl: cl, tr: tr, snapBytes: newHist(), seq: map[string]int64{}, markers: map[string]bool{},
		onWake: onWake, changed: make(chan struct{}, 1), stop: cancel, done: make(chan struct{})}
	go r.run(ctx)
	return r, nil
}

func (r *wakeReader) run(ctx context.Context) {
	defer close(r.done)
	for {
		fs := r.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		at := time.Now()
		r.polled.Add(1)
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil {
				ferr = fmt.Errorf("reading %s/%d: %w", t, p, err)
			}
		})
		r.mu.Lock()
		if ferr != nil && r.err == nil {
			r.err = ferr
		}
		fs.EachRecord(func(rec *kgo.Record) {
			w, err := decodeWake(rec.Value)
			if err != nil {
				if r.err == nil {
					r.err = fmt.Errorf("wake at %s/%d@%d: %w", rec.Topic, rec.Partition, rec.Offset, err)
				}
				return
			}
			lane := laneIndex(w.Lane)
			r.wakes[lane]++
			record(r.snapBytes, int64(w.SnapshotBytes))
			if w.Truncated {
				r.truncated++
			}
			if old := r.seq[w.RunID]; w.Seq > old {
				r.projected += w.Seq - old
				r.seq[w.RunID] = w.Seq
			}
			for _, t := range w.Triggers {
				switch {
				case t.Input != nil && strings.HasPrefix(t.Input.Text, humanTag):
					r.tr.read(key(w.RunID, t.Input.Text), at, lane)
				case t.EventID != nil:
					if strings.HasPrefix(*t.EventID, "marker-") {
						r.markers[w.RunID] = true
					}
					r.tr.read(key(w.RunID, *t.EventID), at, lane)
				}
			}
			if r.onWake != nil {
				r.onWake(w, rec, at)
			}
		})
		r.mu.Unlock()
		select {
		case r.changed <- struct{}{}:
		default:
		}
	}
}

// setOnWake sets the function called for every wake from now on.
func (r *wakeReader) setOnWake(f func(w *wakeInfo, rec *kgo.Record, at time.Time)) {
	r.mu.Lock()
	r.onWake = f
	r.mu.Unlock()
}

// close stops the reader and waits for it.
func (r *wakeReader) close() {
	r.stop()
	<-r.done
	r.cl.Close()
}

// readerStats is a consistent copy of the reader's counters.
type readerStats struct {
	wakes     [2]int64
	truncated int64
	projected int64
	markers   int
	err       error
}

func (r *wakeReader) stats() readerStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return readerStats{wakes: r.wakes, truncated: r.truncated, projected: r.projected, markers: len(r.markers), err: r.err}
}

// waitMarkers waits until the markers of n runs have been read, the reader
// fails, or ctx ends.
func (r *wakeReader) waitMarkers(ctx context.Context, n int) error {
	for {
		s := r.stats()
		if s.err != nil {
			return s.err
		}
		if s.markers >= n {
			return nil
		}
		select {
		case <-r.changed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the wakes of %d runs' markers (%d read): %w", n, s.markers, ctx.Err())
		}
	}
}

// waitFor waits until cond, called under the reader's lock after each
// fetch, holds, the reader fails, or ctx ends.
func (r *wakeReader) waitFor(ctx context.Context, what string, cond func() bool) error {
	for {
		r.mu.Lock()
		ok, err := cond(), r.err
		r.mu.Unlock()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-r.changed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		}
	}
}
