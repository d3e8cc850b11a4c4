package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/problem"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// streamConfig is the test config with the per-address and per-subject
// request limits out of the way: a test opens many streams from loopback.
func (e *env) streamConfig() Config {
	cfg := e.config()
	cfg.RatePerSecond, cfg.RateBurst = 1e6, 1<<20
	cfg.PreAuthRatePerSecond, cfg.PreAuthBurst = 1e6, 1<<20
	return cfg
}

// subscribers is how many streams of run the gateway's tail hands wakes to.
func subscribers(g *Gateway, run string) int {
	t := func() *tail {
		g.streams.mu.Lock()
		defer g.streams.mu.Unlock()
		return g.streams.tails[topics.Partition([]byte(run), g.partitions)]
	}()
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.subs[run])
}

// sameRun returns n run ids, first among them first, all in first's partition.
func sameRun(first string, parts int32, n int) []string {
	out := []string{first}
	for i := 0; len(out) < n; i++ {
		if r := fmt.Sprintf("other-%d", i); topics.Partition([]byte(r), parts) == topics.Partition([]byte(first), parts) {
			out = append(out, r)
		}
	}
	return out
}

// fakeWake is a record the tests put on a wake topic: the gateway streams
// values as they are, so it need not be a wake.
type fakeWake struct {
	Run  string `json:"run"`
	N    int    `json:"n"`
	Prio bool   `json:"prio,omitempty"`
	Pad  string `json:"pad,omitempty"`
}

// produceWakes produces records of run numbered from..to-1 to the wake
// topic (priority when prio), padded to about size bytes, in one
// transaction when txn is set (aborted when abort is), else plainly.
func (e *env) produceWakes(prio bool, run string, from, to, size int, txn string, abort bool) {
	e.t.Helper()
	topic := e.names.Wakes()
	if prio {
		topic = e.names.PriorityWakes()
	}
	opts := []kgo.Opt{kgo.SeedBrokers(e.brokers...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(4 << 20)}
	if txn != "" {
		opts = append(opts, kgo.TransactionalID(txn))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if txn != "" {
		if err := cl.BeginTransaction(); err != nil {
			e.t.Fatal(err)
		}
	}
	part := topics.Partition([]byte(run), e.parts)
	for n := from; n < to; n++ {
		v, _ := json.Marshal(fakeWake{Run: run, N: n, Prio: prio, Pad: strings.Repeat("x", max(size-40, 0))})
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte(run), Value: v, Partition: part}).FirstErr(); err != nil {
			e.t.Fatal(err)
		}
	}
	if txn != "" {
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(!abort)); err != nil {
			e.t.Fatal(err)
		}
	}
}

// sseClient reads a wake stream over a connection of its own, and only
// when asked: a client as slow as a test wants.
type sseClient struct {
	t    *testing.T
	conn net.Conn
	br   *bufio.Reader
	body io.Reader
}

// dialStream opens a wake stream with a raw request and reads its header.
func dialStream(t *testing.T, srv *httptest.Server, run, token, lastID string) *sseClient {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	req := "GET /v1/runs/" + run + "/wakes HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer " + token + "\r\n"
	if lastID != "" {
		req += "Last-Event-ID: " + lastID + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	c := &sseClient{t: t, conn: conn, br: bufio.NewReaderSize(conn, 1<<20)}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	observeResponse("GET", "/v1/runs/"+run+"/wakes", resp.StatusCode, resp.Header, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("wake stream: status %d", resp.StatusCode)
	}
	c.body = bufio.NewReaderSize(resp.Body, 1<<20)
	return c
}

// next reads the next event (comments skipped); ok is false at the end.
func (c *sseClient) next() (ev sseEvent, ok bool) {
	c.t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	r := c.body.(*bufio.Reader)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return ev, false
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if ev.name != "" {
				return ev, true
			}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: "):
			ev.name = line[7:]
		case strings.HasPrefix(line, "id: "):
			ev.id = line[4:]
		case strings.HasPrefix(line, "data: "):
			ev.data += line[6:]
		}
	}
}

// wakeN is the number of a fake wake event.
func wakeN(t *testing.T, ev sseEvent) fakeWake {
	t.Helper()
	var w fakeWake
	if err := json.Unmarshal([]byte(ev.data), &w); err != nil {
		t.Fatalf("event %s %s: %v", ev.name, ev.id, err)
	}
	return w
}

// TestWakeStreamsShareOneTail: 200 streams of four runs, with a projector
// raising real wakes: the gateway reads the wake topics with one client
// and a handful of broker connections, whatever the number of streams;
// every stream gets every wake of its run, in order, with no gap; the tail
// stops after its last stream ends, and starts again for the next.
func TestWakeStreamsShareOneTail(t *testing.T) { brokertest.Run(t, testWakeStreamsShareOneTail) }

func testWakeStreamsShareOneTail(t *testing.T, broker *brokertest.Broker) {
	const perRun, inputs = 50, 4
	e := newEnvOn(t, broker, 2)
	p, _ := e.projector("")
	testenv.WaitFor(t, 30*time.Second, testenv.Until("the projector owns both partitions", func() bool { return len(p.Owned()) == 2 }))
	cfg := e.streamConfig()
	cfg.MaxStreamsPerSubject, cfg.TailIdle = 1000, 100*time.Millisecond
	g, srv := e.gateway(cfg)
	baseConns, baseClients := g.kstats.conns.Load(), g.kstats.clients.Load()

	runs := []string{"run-1", "run-2", "run-3", "run-4"}
	streams := map[string][]*stream{}
	for _, run := range runs {
		for range perRun {
			s := openStream(t, srv, run, tokAll, "")
			s.next("open")
			streams[run] = append(streams[run], s)
		}
	}
	testenv.WaitFor(t, 10*time.Second, testenv.Until("every stream subscribed", func() bool {
		for _, run := range runs {
			if subscribers(g, run) != perRun {
				return false
			}
		}
		return true
	}))
	conns, clients := g.kstats.conns.Load(), g.kstats.clients.Load()
	t.Logf("%d streams: %d Kafka clients and %d broker connections (before any stream: %d and %d)", perRun*len(runs), clients, conns, baseClients, baseConns)
	if clients != 2 || conns > baseConns+4 {
		t.Errorf("%d streams: %d Kafka clients, %d broker connections (%d before any stream); want the producer and one tail client, at most 4 more connections",
			perRun*len(runs), clients, conns, baseConns)
	}

	sent := map[string][]string{} // event ids of the inputs, by run
	for i := range inputs {
		for _, run := range runs {
			a := decodeAccepted(t, post(t, srv, run, tokAll, fmt.Sprintf(`{"input_kind":"message","text":"m%d"}`, i)))
			sent[run] = append(sent[run], a.EventID)
		}
	}
	// What each run's streams must show: the run's wakes on the priority
	// topic, up to the one that carries its last input.
	onTopic := map[string][]string{} // wake ids by run, in offset order
	testenv.WaitFor(t, 60*time.Second, testenv.Until("the projector woke every run for its last input", func() bool {
		clear(onTopic)
		triggered := map[string]int{}
		for _, r := range e.committed(e.names.PriorityWakes()) {
			w, err := topics.DecodeWake(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			onTopic[w.RunID] = append(onTopic[w.RunID], w.WakeID)
			humanTriggers(w, triggered)
		}
		for _, run := range runs {
			for _, id := range sent[run] {
				if triggered[id] != 1 {
					return false
				}
			}
		}
		return true
	}))
	var wg sync.WaitGroup
	errs := make(chan error, perRun*len(runs))
	for _, run := range runs {
		for i, s := range streams[run] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var last streamPos
				for j, want := range onTopic[run] {
					var ev sseEvent
					for ev = range s.events {
						if ev.name == "wake" {
							break
						}
					}
					if ev.name != "wake" {
						errs <- fmt.Errorf("%s stream %d: ended after %d of %d wakes", run, i, j, len(onTopic[run]))
						return
					}
					w, err := topics.DecodeWake([]byte(ev.data))
					if err != nil || w.WakeID != want {
						errs <- fmt.Errorf("%s stream %d: wake %d is %+v (%v), want %s", run, i, j, w, err, want)
						return
					}
					var pos streamPos
					pos.normal, pos.priority, err = ParseStreamPos(ev.id)
					if err != nil || pos.priority <= last.priority || pos.normal < last.normal {
						errs <- fmt.Errorf("%s stream %d: id %s after %s", run, i, ev.id, last)
						return
					}
					last = pos
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if g.kstats.clients.Load() != 2 {
		t.Errorf("%d Kafka clients after the wakes, want 2", g.kstats.clients.Load())
	}

	for _, ss := range streams {
		for _, s := range ss {
			s.close()
		}
	}
	testenv.WaitFor(t, 10*time.Second, testenv.Until("the tails stop once idle", func() bool { return g.streams.running() == 0 }))
	// The next stream starts a tail again.
	s := openStream(t, srv, "run-1", tokAll, "")
	s.next("open")
	a := decodeAccepted(t, post(t, srv, "run-1", tokAll, msg))
	for got := map[string]int{}; got[a.EventID] == 0; {
		w, err := topics.DecodeWake([]byte(s.next("wake").data))
		if err != nil {
			t.Fatal(err)
		}
		humanTriggers(w, got)
	}
}

// TestWakeStreamCaps: beyond MaxStreamsPerSubject a subject's next stream
// is 429, beyond MaxStreams anyone's is 503, each naming its cap; a closed
// stream frees its place in both.
func TestWakeStreamCaps(t *testing.T) {
	e := newEnv(t, 2)
	cfg := e.streamConfig()
	cfg.MaxStreams, cfg.MaxStreamsPerSubject = 3, 2
	_, srv := e.gateway(cfg)
	var open []*stream
	for range 2 {
		s := openStream(t, srv, "run-1", tokAll, "")
		s.next("open")
		open = append(open, s)
	}
	r := call(t, "GET", srv.URL+"/v1/runs/run-2/wakes", tokAll, nil)
	if p := r.problem(t); r.status != 429 || p.Type != problem.RateLimited || r.header.Get("Retry-After") == "" ||
		!strings.Contains(p.Detail, `"alice"`) || !strings.Contains(p.Detail, "MaxStreamsPerSubject") || !strings.Contains(p.Detail, "maximum of 2") {
		t.Errorf("alice's third stream: %d %+v", r.status, p)
	}
	s := openStream(t, srv, "run-1", tokRun1, "") // bob's first: the third of the gateway
	s.next("open")
	r = call(t, "GET", srv.URL+"/v1/runs/run-1/wakes", tokRun1, nil)
	if p := r.problem(t); r.status != 503 || p.Type != problem.Unavailable || !strings.Contains(p.Detail, "MaxStreams)") || !strings.Contains(p.Detail, "maximum of 3") {
		t.Errorf("bob's second stream, the gateway's fourth: %d %+v", r.status, p)
	}
	open[0].close()
	testenv.WaitFor(t, 10*time.Second, testenv.Until("alice's closed stream frees a place", func() bool {
		s, status := tryStream(t, srv, "run-2", tokAll, "")
		if s == nil && status != 429 && status != 503 {
			t.Fatalf("status %d", status)
		}
		if s != nil {
			s.close()
		}
		return s != nil
	}))
}

// TestWakeStreamSlowClientDropped: a client that stops reading is dropped
// once its queue is full, with an event naming where to resume, while a
// stream of the same run and the tail go on; resuming from that position
// (older than the replay buffer holds) delivers the rest exactly once.
func TestWakeStreamSlowClientDropped(t *testing.T) {
	brokertest.Run(t, testWakeStreamSlowClientDropped)
}

func testWakeStreamSlowClientDropped(t *testing.T, broker *brokertest.Broker) {
	const round, size, maxRounds = 8, 64 << 10, 60 // at most 30 MB: more than any socket buffers
	e := newEnvOn(t, broker, 2)
	cfg := e.streamConfig()
	cfg.StreamQueue, cfg.ReplayBytes = 16, 1<<20
	g, srv := e.gateway(cfg)
	slow := dialStream(t, srv, "run-1", tokAll, "")
	if ev, ok := slow.next(); !ok || ev.name != "open" {
		t.Fatalf("slow stream: %+v", ev)
	}
	fast := openStream(t, srv, "run-1", tokAll, "")
	fast.next("open")
	testenv.WaitFor(t, 10*time.Second, testenv.Until("both streams subscribed", func() bool { return subscribers(g, "run-1") == 2 }))

	// Rounds of wakes, each read by the fast stream before the next: it
	// never falls behind by more than a round, the slow one never reads.
	n := 0
	for rounds := 0; subscribers(g, "run-1") == 2; rounds++ {
		if rounds == maxRounds {
			t.Fatalf("the slow stream was not dropped after %d wakes", n)
		}
		e.produceWakes(true, "run-1", n, n+round, size, "", false)
		for range round {
			if got := fastN(t, fast.next("wake")); got != n {
				t.Fatalf("fast stream: wake %d is number %d", n, got)
			}
			n++
		}
	}
	// The tail and the fast stream go on.
	e.produceWakes(true, "run-1", n, n+round, size, "", false)
	for range round {
		if got := fastN(t, fast.next("wake")); got != n {
			t.Fatalf("fast stream after the drop: wake %d is number %d", n, got)
		}
		n++
	}

	// The slow client reads on: the wakes its connection held, then why
	// it was dropped.
	got := 0
	var last string
	for {
		ev, ok := slow.next()
		if !ok {
			t.Fatal("the slow stream ended without a dropped event")
		}
		if ev.name == "wake" {
			if w := fastN(t, ev); w != got {
				t.Fatalf("slow stream: wake %d is number %d", got, w)
			}
			got++
			last = ev.id
			continue
		}
		if ev.name != "dropped" {
			t.Fatalf("slow stream: event %+v", ev)
		}
		var d struct{ Reason, Position, Detail string }
		if err := json.Unmarshal([]byte(ev.data), &d); err != nil || d.Reason != "slow" || d.Position != last || ev.id != last || !strings.Contains(d.Detail, "16 wakes") {
			t.Fatalf("dropped event %+v (%+v, %v); want reason slow at %s", ev, d, err, last)
		}
		break
	}
	if _, ok := slow.next(); ok {
		t.Error("the slow stream went on after its dropped event")
	}
	if got == 0 || got >= n {
		t.Fatalf("the slow stream got %d of %d wakes before it was dropped", got, n)
	}
	t.Logf("the slow stream was dropped after %d of %d wakes", got, n)
	// Resuming from there (older than the replay buffer holds) delivers
	// exactly the rest.
	again := openStream(t, srv, "run-1", tokAll, last)
	if o := again.next("open"); o.id != last {
		t.Errorf("resumed at %s, want %s", o.id, last)
	}
	for i := got; i < n; i++ {
		if w := fastN(t, again.next("wake")); w != i {
			t.Fatalf("resumed stream: wake %d is number %d", i, w)
		}
	}
	e.produceWakes(true, "run-1", n, n+1, 10, "", false)
	if w := fastN(t, again.next("wake")); w != n {
		t.Fatalf("resumed stream: the next wake is number %d, want %d", w, n)
	}
}

// fastN is the number of a fake wake, read without decoding its padding.
func fastN(t *testing.T, ev sseEvent) int {
	t.Helper()
	_, rest, ok := strings.Cut(ev.data, `"n":`)
	end := strings.IndexAny(rest, ",}")
	n, err := strconv.Atoi(rest[:max(end, 0)])
	if !ok || end < 0 || err != nil {
		t.Fatalf("event %s %s is not a fake wake", ev.name, ev.id)
	}
	return n
}

// TestWakeStreamTokenExpiry: a stream ends with a token_expired event when
// its token's exp passes, by a timer and by the injected clock; a static
// token's stream does not.
func TestWakeStreamTokenExpiry(t *testing.T) {
	e := newEnv(t, 2)
	cfg := e.streamConfig()
	cfg.Heartbeat = 20 * time.Millisecond
	_, srv := e.gateway(cfg)
	now := e.clock.Now()
	check := func(s *stream, openID string, exp time.Time) {
		t.Helper()
		ev := s.next("token_expired")
		var d struct {
			Reason, Position, Detail string
			ExpiredAt                time.Time `json:"expired_at"`
		}
		if err := json.Unmarshal([]byte(ev.data), &d); err != nil || d.Reason != "token_expired" || d.Position != openID || ev.id != openID ||
			!d.ExpiredAt.Equal(exp) || !strings.Contains(d.Detail, "new token") {
			t.Errorf("token_expired event %+v (%+v, %v)", ev, d, err)
		}
		for ev := range s.events {
			if ev.name != "comment" {
				t.Errorf("after token_expired: %+v", ev)
			}
		}
	}
	// A second from now: the timer ends it.
	soon := now.Add(time.Second)
	static := openStream(t, srv, "run-1", tokAll, "")
	s := openStream(t, srv, "run-1", SignJWT(jwtKey, Principal{Subject: "erin", Runs: []string{"run-1"}}, soon), "")
	check(s, s.next("open").id, soon)
	// An hour from now, and the clock moves two: the next heartbeat ends it.
	later := now.Add(time.Hour)
	s = openStream(t, srv, "run-2", SignJWT(jwtKey, Principal{Subject: "erin", Runs: []string{"run-2"}}, later), "")
	open := s.next("open")
	s.next("comment")
	e.clock.Advance(2 * time.Hour)
	check(s, open.id, later)
	static.next("open")
	for range 3 {
		static.next("comment") // still flowing
	}
}

// TestWakeStreamLastEventID: a malformed Last-Event-ID, or one past the end
// of the run's partition, is a 400 that says what is wrong.
func TestWakeStreamLastEventID(t *testing.T) {
	e := newEnv(t, 2)
	_, srv := e.gateway(e.streamConfig())
	e.produceWakes(false, "run-1", 0, 3, 10, "", false)
	e.produceWakes(true, "run-1", 0, 2, 10, "", false)
	for _, c := range []struct{ id, detail string }{
		{"+1.+2", "not digits only"},
		{"1.+2", "the priority offset"},
		{"-1.0", "not digits only"},
		{"1.2.3", "not digits only"},
		{"1", "want <normal offset>.<priority offset>"},
		{"1.", "empty"},
		{".1", "empty"},
		{"0x1.0", "not digits only"},
		{"1_0.0", "not digits only"},
		{"١.0", "not digits only"},
		{"99999999999999999999.0", "too large"},
		{"4.0", "past the end"},
		{"0.3", "past the end"},
		{"3.3", "end at offsets 3 and 2"},
	} {
		r := call(t, "GET", srv.URL+"/v1/runs/run-1/wakes", tokAll, nil, "Last-Event-ID", c.id)
		if p := r.problem(t); r.status != 400 || p.Type != problem.BadRequest || !strings.Contains(p.Detail, "Last-Event-ID") || !strings.Contains(p.Detail, c.detail) {
			t.Errorf("Last-Event-ID %q: %d %+v, want 400 saying %q", c.id, r.status, p, c.detail)
		}
	}
	s := openStream(t, srv, "run-1", tokAll, "3.2") // the end itself
	if o := s.next("open"); o.id != "3.2" {
		t.Errorf("open at %s", o.id)
	}
	s = openStream(t, srv, "run-1", tokAll, "0000.0") // digits, however many
	if o := s.next("open"); o.id != "0.0" {
		t.Errorf("open at %s", o.id)
	}
	if w := wakeN(t, s.next("wake")); w.N != 0 {
		t.Errorf("first wake %+v", w)
	}
}

// TestWakeStreamResume: streams resumed from older positions, through a
// catch-up read and through the replay buffer, deliver the run's committed
// wakes between exactly once, whatever the other runs of the partition and
// the transactions (an aborted one is never seen) around them.
func TestWakeStreamResume(t *testing.T) { brokertest.Run(t, testWakeStreamResume) }

func testWakeStreamResume(t *testing.T, broker *brokertest.Broker) {
	for _, replay := range []int{1, 8 << 20} {
		t.Run(fmt.Sprintf("replay=%d", replay), func(t *testing.T) {
			e := newEnvOn(t, broker, 2)
			cfg := e.streamConfig()
			cfg.ReplayBytes = replay
			_, srv := e.gateway(cfg)
			runs := sameRun("run-1", 2, 2)
			txn := "txn-" + e.names.Prefix
			// Wakes numbered in the order they are committed, per lane;
			// the other run's and an aborted transaction's in between.
			n := map[bool]int{}
			produce := func(prio bool, k int, how string) {
				e.produceWakes(!prio, runs[1], 0, 2, 10, "", false)
				switch how {
				case "abort":
					e.produceWakes(prio, "run-1", 1000, 1000+k, 10, txn, true)
					return
				case "txn":
					e.produceWakes(prio, "run-1", n[prio], n[prio]+k, 10, txn, false)
				default:
					e.produceWakes(prio, "run-1", n[prio], n[prio]+k, 10, "", false)
				}
				n[prio] += k
			}
			produce(false, 3, "txn")
			produce(true, 2, "")
			produce(true, 2, "abort")
			produce(false, 2, "")

			// A stream from the start: a catch-up read (the tail starts at the end).
			all := openStream(t, srv, "run-1", tokAll, "0.0")
			all.next("open")
			seen := collect(t, all, 7)
			produce(true, 3, "txn") // live
			produce(false, 1, "")
			seen = append(seen, collect(t, all, 4)...)
			checkLanes(t, "from the start", seen, 0, 0)

			for _, from := range []int{0, 2, 4, 6, 8} {
				s := openStream(t, srv, "run-1", tokAll, seen[from].id)
				if o := s.next("open"); o.id != seen[from].id {
					t.Errorf("resumed at %s, want %s", o.id, seen[from].id)
				}
				got := collect(t, s, len(seen)-from-1)
				if !sameLanes(append([]seenWake{seen[from]}, got...), seen[from:]) {
					t.Errorf("resumed from wake %d (%s): %v, want %v in each lane's order", from, seen[from].id, got, seen[from+1:])
				}
				produce(true, 1, "")
				produce(false, 1, "txn")
				got = append(got, collect(t, s, 2)...)
				more := collect(t, all, 2)
				if !sameLanes(got[len(got)-2:], more) {
					t.Errorf("after resuming from wake %d: %v, the stream from the start %v", from, got[len(got)-2:], more)
				}
				seen = append(seen, more...)
				s.close()
			}
			checkLanes(t, "from the start, at the end", seen, 0, 0)
		})
	}
}

// seenWake is a wake a test stream received.
type seenWake struct {
	prio bool
	n    int
	id   string
}

// collect reads k wakes of run-1 from s.
func collect(t *testing.T, s *stream, k int) []seenWake {
	t.Helper()
	var out []seenWake
	for range k {
		ev := s.next("wake")
		var w struct {
			Run  string `json:"run"`
			N    int    `json:"n"`
			Prio bool   `json:"prio"`
		}
		if err := json.Unmarshal([]byte(ev.data), &w); err != nil || w.Run != "run-1" || w.N >= 1000 {
			t.Fatalf("wake %s (%v) on run-1's stream", ev.data, err)
		}
		out = append(out, seenWake{w.Prio, w.N, ev.id})
	}
	return out
}

// sameLanes reports whether a and b hold the same wakes in each lane's
// order, a's ids growing from its first.
func sameLanes(a, b []seenWake) bool {
	lanes := func(ws []seenWake) map[bool][]int {
		m := map[bool][]int{}
		for _, w := range ws {
			m[w.prio] = append(m[w.prio], w.n)
		}
		return m
	}
	la, lb := lanes(a), lanes(b)
	var last streamPos
	for i, w := range a {
		var p streamPos
		p.normal, p.priority, _ = ParseStreamPos(w.id)
		if i > 0 && (p.normal < last.normal || p.priority < last.priority || p == last) {
			return false
		}
		last = p
	}
	return slices.Equal(la[false], lb[false]) && slices.Equal(la[true], lb[true])
}

// checkLanes checks that each lane's wakes are numbered on from its first
// number, with no gap or repeat, and that the ids only grow.
func checkLanes(t *testing.T, what string, ws []seenWake, normal0, prio0 int) {
	t.Helper()
	next := map[bool]int{false: normal0, true: prio0}
	var last streamPos
	for i, w := range ws {
		if w.n != next[w.prio] {
			t.Fatalf("%s: wake %d is number %d of lane prio=%v, want %d: %v", what, i, w.n, w.prio, next[w.prio], ws)
		}
		next[w.prio]++
		var p streamPos
		p.normal, p.priority, _ = ParseStreamPos(w.id)
		if p.normal < last.normal || p.priority < last.priority || p == last {
			t.Fatalf("%s: id %s after %s", what, w.id, last)
		}
		last = p
	}
}

// committed reads the committed records of topic (read_committed) up to
// its last stable offsets.
func (e *env) committed(topic string) []*kgo.Record { e.t.Helper(); return e.readTopic(topic, true) }
