package gateway

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/problem"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// streamPos is where a wake stream stands: the next offset of the run's
// partition in the normal and the priority wake topic. It is the SSE event
// id, "<normal>.<priority>", so Last-Event-ID resumes both lanes exactly.
type streamPos struct{ normal, priority int64 }

func (p streamPos) String() string {
	return strconv.FormatInt(p.normal, 10) + "." + strconv.FormatInt(p.priority, 10)
}

// ParseStreamPos parses an SSE event id of a wake stream.
func ParseStreamPos(s string) (normal, priority int64, err error) {
	a, b, ok := strings.Cut(s, ".")
	if ok {
		if normal, err = strconv.ParseInt(a, 10, 64); err == nil {
			priority, err = strconv.ParseInt(b, 10, 64)
		}
	}
	if !ok || err != nil || normal < 0 || priority < 0 {
		return 0, 0, fmt.Errorf("want <normal offset>.<priority offset> as sent in an id: line, got %q", s)
	}
	return normal, priority, nil
}

// fetchErrorPause is how long a wake stream waits after a failed fetch.
const fetchErrorPause = 500 * time.Millisecond

// wakes is GET /v1/runs/{run_id}/wakes: the run's wakes, both lanes, as
// Server-Sent Events. It reads the wake topics with read_committed, so it
// sends exactly the wakes of committed projector transactions. Without
// Last-Event-ID it starts at the end; the first event ("open") carries the
// position it starts from.
func (g *Gateway) wakes(w http.ResponseWriter, r *http.Request, p *Principal, run string) {
	fl, ok := w.(http.Flusher)
	if !ok {
		problem.Write(w, r, problem.New(http.StatusInternalServerError, problem.Internal, "the server cannot stream"))
		return
	}
	var pos streamPos
	resume := r.Header.Get("Last-Event-ID")
	if resume != "" {
		var err error
		if pos.normal, pos.priority, err = ParseStreamPos(resume); err != nil {
			problem.Write(w, r, problem.New(http.StatusBadRequest, problem.BadRequest, "Last-Event-ID: %v", err))
			return
		}
	}
	if prob := g.authorize(r.Context(), p, run); prob != nil {
		problem.Write(w, r, prob)
		return
	}
	select {
	case g.streams <- struct{}{}:
		defer func() { <-g.streams }()
	default:
		problem.Write(w, r, g.unavailable(problem.Unavailable, "the gateway serves its maximum of %d wake streams; retry later", g.cfg.MaxStreams))
		return
	}
	g.wg.Add(1)
	defer g.wg.Done()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(g.ctx, cancel) // Close ends every stream
	defer stop()

	part := topics.Partition([]byte(run), g.partitions)
	normal, prio := g.cfg.Names.Wakes(), g.cfg.Names.PriorityWakes()
	if resume == "" {
		// The end is resolved here rather than left to the consumer, so the
		// open event can name it: a client that reconnects with it misses
		// nothing sent after it connected.
		ends, err := g.adm.ListCommittedOffsets(ctx, normal, prio)
		if err == nil {
			err = ends.Error()
		}
		if err != nil {
			problem.Write(w, r, g.unavailable(problem.Unavailable, "cannot read the wake topics' end offsets from Kafka: %v", err))
			return
		}
		n, ok1 := ends.Lookup(normal, part)
		pr, ok2 := ends.Lookup(prio, part)
		if !ok1 || !ok2 {
			problem.Write(w, r, g.unavailable(problem.Unavailable, "the wake topics have no partition %d; check that they are co-partitioned", part))
			return
		}
		pos = streamPos{n.Offset, pr.Offset}
	}
	cl, err := kgo.NewClient(append(g.cfg.kafkaOpts(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
			normal: {part: kgo.NewOffset().At(pos.normal)},
			prio:   {part: kgo.NewOffset().At(pos.priority)},
		}),
		kgo.FetchMaxWait(time.Second),
	)...)
	if err != nil {
		problem.Write(w, r, g.unavailable(problem.Unavailable, "cannot consume the wake topics: %v", err))
		return
	}
	defer cl.Close()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx would otherwise hold events back
	w.WriteHeader(http.StatusOK)
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "retry: %d\nevent: open\nid: %s\ndata: {\"run_id\":%q,\"partition\":%d}\n\n", g.cfg.RetryAfter.Milliseconds(), pos, run, part)
	if _, err := w.Write(buf.Bytes()); err != nil {
		return
	}
	fl.Flush()

	type batch struct {
		recs []*kgo.Record
		err  error
	}
	fetched := make(chan batch)
	go func() {
		defer close(fetched)
		for {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			var b batch
			fs.EachError(func(_ string, _ int32, err error) { b.err = err })
			b.recs = fs.Records()
			select {
			case fetched <- b:
			case <-ctx.Done():
				return
			}
			if b.err != nil && len(b.recs) == 0 {
				// A broker in trouble can fail every fetch at once: pause
				// so that a stream does not spin on errors.
				t := time.NewTimer(fetchErrorPause)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return
				}
			}
		}
	}()
	hb := time.NewTicker(g.cfg.Heartbeat)
	defer hb.Stop()
	for {
		select {
		case <-ctx.Done():
			cancel()
			for range fetched {
			}
			return
		case <-hb.C:
			if _, err := w.Write([]byte(": heartbeat\n\n")); err != nil {
				cancel()
				continue
			}
			fl.Flush()
		case b, ok := <-fetched:
			if !ok {
				return
			}
			if b.err != nil {
				g.cfg.Logger.Warn("gateway: wake stream fetch", "run", run, "err", b.err)
			}
			buf.Reset()
			for _, rec := range b.recs {
				if rec.Topic == normal {
					pos.normal = rec.Offset + 1
				} else {
					pos.priority = rec.Offset + 1
				}
				if string(rec.Key) != run {
					continue
				}
				fmt.Fprintf(&buf, "event: wake\nid: %s\n", pos)
				for _, line := range bytes.Split(rec.Value, []byte("\n")) {
					buf.WriteString("data: ")
					buf.Write(line)
					buf.WriteByte('\n')
				}
				buf.WriteByte('\n')
			}
			if buf.Len() > 0 {
				if _, err := w.Write(buf.Bytes()); err != nil {
					cancel()
					continue
				}
				fl.Flush()
			}
		}
	}
}
