package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/problem"
)

// streamPos is where a wake stream stands: the next offset of the run's
// partition in the normal and the priority wake topic. It is the SSE event
// id, "<normal>.<priority>", so Last-Event-ID resumes both lanes exactly:
// every wake of the run below both offsets was sent before the event.
type streamPos struct{ normal, priority int64 }

func (p streamPos) String() string {
	return strconv.FormatInt(p.normal, 10) + "." + strconv.FormatInt(p.priority, 10)
}

// at is the offset of the priority lane when prio is set, else the normal one's.
func (p *streamPos) at(prio bool) *int64 {
	if prio {
		return &p.priority
	}
	return &p.normal
}

// raise moves p to q wherever q is further.
func (p *streamPos) raise(q streamPos) {
	p.normal = max(p.normal, q.normal)
	p.priority = max(p.priority, q.priority)
}

// ParseStreamPos parses an SSE event id of a wake stream strictly: two
// decimal offsets of digits only ("+1", "-1", " 1", "0x1" and extra parts
// are refused), each at most 2^63-1.
func ParseStreamPos(s string) (normal, priority int64, err error) {
	a, b, ok := strings.Cut(s, ".")
	if !ok {
		return 0, 0, fmt.Errorf("want <normal offset>.<priority offset> as sent in an id: line, got %q", s)
	}
	if normal, err = parseOffset(a); err != nil {
		return 0, 0, fmt.Errorf("the normal offset of %q: %v", s, err)
	}
	if priority, err = parseOffset(b); err != nil {
		return 0, 0, fmt.Errorf("the priority offset of %q: %v", s, err)
	}
	return normal, priority, nil
}

func parseOffset(s string) (int64, error) {
	if s == "" {
		return 0, errors.New("empty; want digits")
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, errors.New("not digits only")
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, errors.New("too large for an offset")
	}
	return v, nil
}

// streamWriteTimeout bounds each write to a stream's client: a client that
// takes longer to take one in is gone, and its stream ends.
const streamWriteTimeout = 30 * time.Second

// wakes is GET /v1/runs/{run_id}/wakes: the run's wakes, both lanes, as
// Server-Sent Events, read_committed, so exactly the wakes of committed
// projector transactions. Without Last-Event-ID it starts at the committed
// end; the first event ("open") carries the position it starts from. The
// stream is served by the wake stream subsystem (streams.go), which reads
// each partition once for all the streams of this instance.
//
// It ends with an event saying why when its token expires (token_expired)
// or it falls more than Config.StreamQueue wakes behind (dropped); both name
// the position to resume from.
func (g *Gateway) wakes(w http.ResponseWriter, r *http.Request, p *Principal, run string) error {
	fl, ok := w.(http.Flusher)
	if !ok {
		return problem.New(http.StatusInternalServerError, problem.Internal, "the server cannot stream")
	}
	var from *streamPos
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		var pos streamPos
		var err error
		if pos.normal, pos.priority, err = ParseStreamPos(id); err != nil {
			return problem.New(http.StatusBadRequest, problem.BadRequest, "Last-Event-ID: %v", err)
		}
		from = &pos
	}
	if err := g.authorize(r.Context(), p, run); err != nil {
		return err
	}
	return g.streams.serve(w, fl, r, p, run, from)
}

// wakeStream is the writing side of a wake stream.
type wakeStream struct {
	s   *wakeStreams
	w   http.ResponseWriter
	fl  http.Flusher
	rc  *http.ResponseController
	run string
	p   *Principal
	pos streamPos // every wake of the run below it was sent
	buf bytes.Buffer
}

// stream writes the stream's headers and its open event, joins the
// partition's tail t and sends the run's wakes until the stream ends.
func (st *wakeStream) stream(ctx context.Context, cancel context.CancelCauseFunc, t *tail, part int32) {
	h := st.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx would otherwise hold events back
	st.w.WriteHeader(http.StatusOK)
	fmt.Fprintf(&st.buf, "retry: %d\nevent: open\nid: %s\ndata: {\"run_id\":%q,\"partition\":%d}\n\n", st.s.cfg.RetryAfter.Milliseconds(), st.pos, st.run, part)
	if st.flush() != nil {
		return
	}
	sub := newSubscriber(st.run)
	if !st.join(ctx, t, sub) {
		return
	}
	defer t.leave(sub)
	st.serve(ctx, cancel, sub)
}

// join subscribes sub to the partition's tail t and sends what the stream
// misses up to it: the tail's replay, and before it, when the stream starts
// older than the tail's replay buffer, a catch-up read. It reports whether
// the stream goes on; when it does, the caller leaves t.
func (st *wakeStream) join(ctx context.Context, t *tail, sub *subscriber) bool {
	replay, joined := t.join(sub, st.pos)
	if !joined {
		// Older than the tail's replay buffer: read up to it first.
		var err error
		if replay, err = st.catchUp(ctx, t, sub); err != nil {
			st.end(ctx, err)
			return false
		}
	}
	for _, it := range replay {
		st.add(it)
	}
	if st.flush() != nil {
		t.leave(sub)
		return false
	}
	return true
}

// serve sends sub's wakes and a heartbeat until the stream ends: its
// context ends (Drain or Close, the client, or its token's expiry, which
// cancel records), it falls too far behind, or a write fails.
func (st *wakeStream) serve(ctx context.Context, cancel context.CancelCauseFunc, sub *subscriber) {
	cfg, p := st.s.cfg, st.p
	hb := time.NewTicker(cfg.Heartbeat)
	defer hb.Stop()
	var q []*item
	for {
		select {
		case <-ctx.Done():
			st.end(ctx, nil)
			return
		case <-sub.dropped:
			st.event("dropped", map[string]any{"reason": "slow", "position": st.pos.String(),
				"detail": fmt.Sprintf("this stream fell more than %d wakes behind and was dropped; reconnect with Last-Event-ID %s to resume", cfg.StreamQueue, st.pos)})
			return
		case <-hb.C:
			if !p.Expires.IsZero() && !cfg.Now().Before(p.Expires) {
				cancel(errTokenExpired) // the injected clock got there first
				continue
			}
			st.buf.WriteString(": heartbeat\n\n")
			if st.flush() != nil {
				return
			}
		case <-sub.notify:
			q = sub.take(q)
			if st.deliver(q) != nil {
				return
			}
		}
	}
}

// deliver sends the wakes of q, flushing every 64 KiB and at the end, and
// clears q's slots so that the items can be collected.
func (st *wakeStream) deliver(q []*item) error {
	for i, it := range q {
		st.add(it)
		q[i] = nil
		if st.buf.Len() >= 64<<10 {
			if err := st.flush(); err != nil {
				return err
			}
		}
	}
	return st.flush()
}

// add buffers it as a wake event unless the stream is past it.
func (st *wakeStream) add(it *item) {
	if it.offset < *st.pos.at(it.prio) {
		return
	}
	st.pos.raise(it.after)
	st.buf.WriteString("event: wake\nid: ")
	st.buf.WriteString(st.pos.String())
	st.buf.WriteByte('\n')
	st.buf.Write(it.data)
	st.buf.WriteByte('\n')
}

// flush writes what is buffered.
func (st *wakeStream) flush() error {
	if st.buf.Len() == 0 {
		return nil
	}
	_ = st.rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	_, err := st.w.Write(st.buf.Bytes())
	st.buf.Reset()
	if err == nil {
		st.fl.Flush()
	}
	return err
}

// event writes a final event named name whose data is the JSON of data.
func (st *wakeStream) event(name string, data map[string]any) {
	b, _ := json.Marshal(data)
	fmt.Fprintf(&st.buf, "event: %s\nid: %s\ndata: %s\n\n", name, st.pos, b)
	_ = st.flush()
}

// end writes why the stream's context ended, when the client is still there
// to read it: the token expired. err is the error that ended a phase, if
// it was not the context.
func (st *wakeStream) end(ctx context.Context, err error) {
	if ctx.Err() == nil {
		if err != nil {
			st.s.cfg.Logger.Warn("gateway: wake stream", "run", st.run, "err", err)
		}
		return
	}
	if context.Cause(ctx) == errTokenExpired {
		st.event("token_expired", map[string]any{"reason": "token_expired", "position": st.pos.String(),
			"expired_at": st.p.Expires.UTC().Format(time.RFC3339),
			"detail":     fmt.Sprintf("the bearer token expired at %s; reconnect with a new token and Last-Event-ID %s to resume", st.p.Expires.UTC().Format(time.RFC3339), st.pos)})
	}
}

// catchUp reads the partition from the stream's position with a client of
// its own, writing the run's wakes, until the position reaches the tail's
// replay buffer; then it joins the tail and returns the wakes to write from
// the buffer.
func (st *wakeStream) catchUp(ctx context.Context, t *tail, sub *subscriber) ([]*item, error) {
	cl, done, err := st.s.catchUpClient(ctx, t.part, st.pos)
	if err != nil {
		return nil, err
	}
	defer done()
	for {
		if replay, ok := t.join(sub, st.pos); ok {
			return replay, nil
		}
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			n++
			st.addRecord(r)
		})
		if err := st.flush(); err != nil {
			return nil, err
		}
		if ferr != nil {
			st.s.cfg.Logger.Warn("gateway: wake stream catch-up fetch", "run", st.run, "err", ferr)
			if n == 0 && !pause(ctx) {
				return nil, ctx.Err()
			}
		}
	}
}

// addRecord buffers a record the catch-up read as a wake event when it is
// one of the stream's run; a position moves past every record.
func (st *wakeStream) addRecord(r *kgo.Record) {
	next := st.pos.at(r.Topic == st.s.prio)
	if r.Offset < *next {
		return
	}
	*next = r.Offset + 1
	if r.Attrs.IsControl() || string(r.Key) != st.run {
		return
	}
	fmt.Fprintf(&st.buf, "event: wake\nid: %s\n", st.pos)
	st.buf.Write(renderData(r.Value))
	st.buf.WriteByte('\n')
}
