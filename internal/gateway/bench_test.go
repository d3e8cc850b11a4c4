package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// BenchmarkInputToWake: human inputs POSTed to the gateway by one client
// every 20ms (the latency a human sees), by one client as fast as it can,
// and by 8 concurrent clients, each for its own run, with a projector running: the rate of
// accepted inputs, and the latency from sending the request to the input's
// wake being committed on the priority topic (p50, p99), and to the 202
// (p99). The baseline (BenchmarkInputToWake/direct) produces the same
// events straight to the human input topic with franz-go at the same
// concurrency: what the gateway costs over a plain producer.
func BenchmarkInputToWake(b *testing.B) {
	for _, load := range []struct {
		clients int
		pace    time.Duration
	}{{1, 20 * time.Millisecond}, {1, 0}, {8, 0}} {
		for _, direct := range []bool{false, true} {
			name := "gateway"
			if direct {
				name = "direct"
			}
			b.Run(fmt.Sprintf("%s/clients=%d/pace=%v", name, load.clients, load.pace), func(b *testing.B) {
				benchInput(b, direct, load.clients, load.pace)
			})
		}
	}
}

func benchInput(b *testing.B, direct bool, clients int, pace time.Duration) {
	const partitions = 4
	e := newEnv(b, partitions)
	cfg := e.config()
	cfg.RatePerSecond, cfg.RateBurst = 1e9, 1<<30 // the limiters are not under test
	cfg.PreAuthRatePerSecond, cfg.PreAuthBurst = 1e9, 1<<30
	_, srv := e.gateway(cfg)
	p, _ := e.projector("")
	testenv.WaitFor(b, 30*time.Second, testenv.Until("the projector owns every partition", func() bool { return len(p.Owned()) >= partitions }))

	// The wake watcher: when each input's priority wake was committed.
	var mu sync.Mutex
	wokenAt := map[string]time.Time{}
	woke := make(chan struct{}, 1)
	reader, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ConsumeTopics(e.names.PriorityWakes()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer reader.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			fs := reader.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			now := time.Now()
			mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				w, err := topics.DecodeWake(r.Value)
				if err != nil {
					return
				}
				for _, tr := range w.Triggers {
					if tr.EventID != nil {
						wokenAt[*tr.EventID] = now
					}
				}
			})
			mu.Unlock()
			select {
			case woke <- struct{}{}:
			default:
			}
		}
	}()
	defer func() { cancel(); wg.Wait() }()

	producer, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		b.Fatal(err)
	}
	defer producer.Close()

	type sent struct {
		id       string
		at, ackd time.Time
	}
	out := make([][]sent, clients)
	var next atomic.Int64
	var failed atomic.Int64
	b.ResetTimer()
	began := time.Now()
	var cw sync.WaitGroup
	for c := range clients {
		cw.Add(1)
		go func() {
			defer cw.Done()
			run := fmt.Sprintf("bench-run-%d", c)
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				if pace > 0 {
					time.Sleep(pace) // pacing the load, not synchronisation
				}
				text := fmt.Sprintf("input %d", i)
				at := time.Now()
				var id string
				if direct {
					id = fmt.Sprintf("direct-%d", i)
					ev := topics.Event{ID: id, Source: "/bench", Type: (&topics.Input{}).EventType(), Time: topics.NewTime(at),
						RunID: run, AgentID: "human:bench", SchemaVersion: topics.CurrentSchemaVersion,
						Data: &topics.Input{InputID: id, InputKind: "steer", Text: text}}
					rec, err := topics.EventRecord(e.names.HumanInput(), &ev, "")
					if err == nil {
						rec.Partition = topics.Partition(rec.Key, partitions)
						err = producer.ProduceSync(context.Background(), rec).FirstErr()
					}
					if err != nil {
						failed.Add(1)
						continue
					}
				} else {
					a, err := sendInput(http.DefaultClient, srv.URL, run, "steer", text)
					if err != nil {
						failed.Add(1)
						continue
					}
					id = a.EventID
				}
				out[c] = append(out[c], sent{id: id, at: at, ackd: time.Now()})
			}
		}()
	}
	cw.Wait()
	accepting := time.Since(began)
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d inputs failed", n, b.N)
	}
	all := slices.Concat(out...)
	// Every input's wake, within a bound.
	for deadline := time.After(60 * time.Second); ; {
		mu.Lock()
		missing := 0
		for _, s := range all {
			if _, ok := wokenAt[s.id]; !ok {
				missing++
			}
		}
		mu.Unlock()
		if missing == 0 {
			break
		}
		select {
		case <-woke:
		case <-deadline:
			b.Fatalf("%d of %d inputs have no committed wake", missing, len(all))
		}
	}
	var toWake, toAck []time.Duration
	mu.Lock()
	for _, s := range all {
		toWake = append(toWake, wokenAt[s.id].Sub(s.at))
		toAck = append(toAck, s.ackd.Sub(s.at))
	}
	mu.Unlock()
	slices.Sort(toWake)
	slices.Sort(toAck)
	q := func(d []time.Duration, f float64) float64 {
		return float64(d[min(len(d)-1, int(f*float64(len(d))))].Microseconds()) / 1000
	}
	b.ReportMetric(float64(len(all))/accepting.Seconds(), "inputs/s")
	b.ReportMetric(q(toAck, 0.99), "p99_ack_ms")
	b.ReportMetric(q(toWake, 0.50), "p50_wake_ms")
	b.ReportMetric(q(toWake, 0.99), "p99_wake_ms")
}

// sendInput posts one input of kind with text to run through the gateway at
// url, as the benchmarks send them, and returns its 202's answer.
func sendInput(hc *http.Client, url, run, kind, text string) (accepted, error) {
	var a accepted
	body, _ := json.Marshal(map[string]string{"input_kind": kind, "text": text})
	req, err := http.NewRequest(http.MethodPost, url+"/v1/runs/"+run+"/input", bytes.NewReader(body))
	if err != nil {
		return a, err
	}
	req.Header.Set("Authorization", "Bearer "+tokAll)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return a, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return a, fmt.Errorf("status %d", resp.StatusCode)
	}
	return a, json.NewDecoder(resp.Body).Decode(&a)
}
