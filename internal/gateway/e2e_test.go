package gateway

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// sseEvent is one Server-Sent Event.
type sseEvent struct{ name, id, data string }

// stream is a client of a wake stream.
type stream struct {
	t      *testing.T
	resp   *http.Response
	events chan sseEvent
	cancel context.CancelFunc
}

func openStream(t *testing.T, srv *httptest.Server, run, token, lastID string) *stream {
	t.Helper()
	s, status := tryStream(t, srv, run, token, lastID)
	if s == nil {
		t.Fatalf("wake stream: status %d", status)
	}
	return s
}

// tryStream opens a wake stream; when the answer is not a stream it returns
// nil and the status.
func tryStream(t *testing.T, srv *httptest.Server, run, token, lastID string) (*stream, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/runs/"+run+"/wakes", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	observeResponse("GET", req.URL.Path, resp.StatusCode, resp.Header, nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		resp.Body.Close()
		return nil, resp.StatusCode
	}
	s := &stream{t: t, resp: resp, events: make(chan sseEvent, 100), cancel: cancel}
	go func() {
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, ":"):
				s.events <- sseEvent{name: "comment", data: line}
			case line == "":
				if ev.name != "" {
					s.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				ev.name = line[7:]
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "data: "):
				ev.data += line[6:]
			}
		}
	}()
	t.Cleanup(s.close)
	return s, resp.StatusCode
}

func (s *stream) close() {
	s.cancel()
	s.resp.Body.Close()
	for range s.events {
	}
}

// next returns the next event named name, skipping others.
func (s *stream) next(name string) sseEvent {
	s.t.Helper()
	for ev := range s.events {
		if ev.name == name {
			return ev
		}
	}
	s.t.Fatalf("the wake stream ended before a %q event", name)
	return sseEvent{}
}

// humanTriggers counts, per event id, the human_input triggers of wakes.
func humanTriggers(w *topics.Wake, counts map[string]int) {
	for _, tr := range w.Triggers {
		if tr.Kind == topics.TriggerHumanInput && tr.EventID != nil {
			counts[*tr.EventID]++
		}
	}
}

// TestInputWakeStream: with a real projector, an accepted input raises a
// wake on the priority topic; the run's wake stream delivers it; a stream
// resumed from the open event's id delivers it again, exactly; a retried
// Idempotency-Key, sent to another gateway instance (so produced twice),
// raises one wake.
func TestInputWakeStream(t *testing.T) { brokertest.Run(t, testInputWakeStream) }

func testInputWakeStream(t *testing.T, broker *brokertest.Broker) {
	e := newEnvOn(t, broker, 2)
	p, _ := e.projector("")
	testenv.WaitFor(t, 30*time.Second, testenv.Until("the projector owns both partitions", func() bool { return len(p.Owned()) == 2 }))
	_, srv := e.gateway(e.config())
	_, srv2 := e.gateway(e.config())

	st := openStream(t, srv, "run-1", tokRun1, "")
	open := st.next("open")
	if !strings.Contains(open.data, `"run_id":"run-1"`) || open.id == "" {
		t.Fatalf("open event %+v", open)
	}
	other := openStream(t, srv, "run-2", tokAll, "")
	other.next("open")

	a := decodeAccepted(t, post(t, srv, "run-1", tokRun1, `{"input_kind":"steer","text":"go left"}`, "Idempotency-Key", "once"))
	dup := decodeAccepted(t, post(t, srv2, "run-1", tokRun1, `{"input_kind":"steer","text":"go left"}`, "Idempotency-Key", "once"))
	if dup.EventID != a.EventID || dup.Offset == a.Offset {
		t.Fatalf("the retry to another instance: %+v, first %+v", dup, a)
	}
	b := decodeAccepted(t, post(t, srv, "run-1", tokRun1, msg))
	c := decodeAccepted(t, post(t, srv, "run-2", tokAll, msg))

	counts := map[string]int{}
	var ids []string
	for counts[b.EventID] == 0 {
		ev := st.next("wake")
		w, err := topics.DecodeWake([]byte(ev.data))
		if err != nil {
			t.Fatalf("stream data is not a wake: %v: %s", err, ev.data)
		}
		if w.RunID != "run-1" || w.Lane != topics.LanePriority {
			t.Errorf("wake of run %s lane %s on run-1's stream", w.RunID, w.Lane)
		}
		humanTriggers(w, counts)
		ids = append(ids, ev.id)
	}
	if counts[a.EventID] != 1 || counts[c.EventID] != 0 {
		t.Errorf("human_input triggers %v: want %s once (its duplicate is applied once) and nothing of run-2", counts, a.EventID)
	}
	w2, err := topics.DecodeWake([]byte(other.next("wake").data))
	if err != nil || w2.RunID != "run-2" {
		t.Errorf("run-2's stream: %+v %v", w2, err)
	}

	// The same wakes are on the priority topic, read_committed.
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ConsumeTopics(e.names.PriorityWakes()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	onTopic := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for onTopic[b.EventID] == 0 || onTopic[c.EventID] == 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("priority topic: %v (seen %v)", ctx.Err(), onTopic)
		}
		fs.EachRecord(func(r *kgo.Record) {
			w, err := topics.DecodeWake(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			humanTriggers(w, onTopic)
		})
	}
	if onTopic[a.EventID] != 1 {
		t.Errorf("priority topic: %d human_input triggers of %s, want 1", onTopic[a.EventID], a.EventID)
	}

	// Resuming from the open event's id replays exactly what followed it.
	st.close()
	again := openStream(t, srv, "run-1", tokRun1, open.id)
	if o := again.next("open"); o.id != open.id {
		t.Errorf("resumed stream opens at %s, want %s", o.id, open.id)
	}
	for i, id := range ids {
		if ev := again.next("wake"); ev.id != id {
			t.Fatalf("resumed wake %d has id %s, want %s", i, ev.id, id)
		}
	}
}

// TestStreamLimitAndHeartbeat: beyond MaxStreams a stream is 503 with
// Retry-After; an idle stream sends heartbeat comments; a closed stream
// frees its slot.
func TestStreamLimitAndHeartbeat(t *testing.T) {
	e := newEnv(t, 2)
	cfg := e.config()
	cfg.MaxStreams, cfg.Heartbeat = 1, 10*time.Millisecond
	_, srv := e.gateway(cfg)
	st := openStream(t, srv, "run-1", tokAll, "")
	st.next("open")
	if c := st.next("comment"); c.data != ": heartbeat" {
		t.Errorf("comment %q", c.data)
	}
	r := call(t, "GET", srv.URL+"/v1/runs/run-2/wakes", tokAll, nil)
	if r.status != 503 || r.header.Get("Retry-After") == "" || !strings.Contains(r.problem(t).Detail, "maximum of 1 wake streams") {
		t.Errorf("a second stream: %d %s", r.status, r.body)
	}
	st.close()
	var again *stream
	testenv.WaitFor(t, 10*time.Second, testenv.Until("the closed stream's slot is free", func() bool {
		var status int
		again, status = tryStream(t, srv, "run-2", tokAll, "0.0")
		if again == nil && status != 503 {
			t.Fatalf("status %d", status)
		}
		return again != nil
	}))
	if o := again.next("open"); o.id != "0.0" {
		t.Errorf("resumed at %s, want 0.0", o.id)
	}
}
