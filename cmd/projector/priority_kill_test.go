package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestPriorityWakeOnceAcrossKill: a human input's wake goes out on the
// priority path while the agent lane's commit in flight is stuck (the
// embedded broker holds its EndTxn), so before the commit that would carry
// the input's state and offset. The instance is then SIGKILLed. The next
// instance fences both of the partition's producers, restores, applies the
// input again (its offset was never committed) and must not publish its
// wake a second time: a read_committed reader sees it exactly once. Once
// with the data directory kept (the watermark from Pebble), once with a
// fresh one (the watermark from the changelog, after its last complete
// commit). kfake only: it holds the EndTxn.
func TestPriorityWakeOnceAcrossKill(t *testing.T) {
	for _, fresh := range []bool{false, true} {
		name := "same-data-dir"
		if fresh {
			name = "fresh-data-dir"
		}
		t.Run(name, func(t *testing.T) { testPriorityWakeOnceAcrossKill(t, fresh) })
	}
}

func testPriorityWakeOnceAcrossKill(t *testing.T, fresh bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "projector")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	b := brokertest.NewKfake(t)
	const partitions = 1
	names := topics.Names{Prefix: b.Prefix(t, "prio"), Version: 1}
	group := "prio-" + names.Prefix
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if err := cluster.CreateTopics(ctx, kadm.NewClient(cl), names, partitions, 1); err != nil {
		t.Fatal(err)
	}

	// The agent lane's transactions (transactional id <group>-0) end only
	// once released while hold is set; the priority path's (-0-priority)
	// are never held.
	var hold, held atomic.Bool
	release := make(chan struct{})
	closeRelease := sync.OnceFunc(func() { close(release) })
	t.Cleanup(closeRelease)
	// A held EndTxn is answered, once released, with an error: its
	// instance is dead by then, and the transaction stays open until the
	// next instance's fencing aborts it.
	b.Cluster.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.Cluster.KeepControl()
		if hold.Load() && req.(*kmsg.EndTxnRequest).TransactionalID == group+"-0" {
			held.Store(true)
			b.Cluster.SleepControl(func() { <-release })
			resp := req.ResponseKind().(*kmsg.EndTxnResponse)
			resp.ErrorCode = kerr.UnknownServerError.Code
			return resp, nil, true
		}
		return nil, nil, false
	})

	at := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond) // no timer falls due
	const run = "prio-run"
	ev := func(id, agent string, data topics.Payload) topics.Event {
		at = at.Add(time.Millisecond)
		return topics.Event{ID: id, Source: "/agents/" + agent, Type: data.EventType(), Time: topics.NewTime(at), RunID: run,
			AgentID: agent, SchemaVersion: topics.CurrentSchemaVersion, Data: data}
	}
	produce := func(topic string, evs ...topics.Event) {
		t.Helper()
		for i := range evs {
			r, err := topics.EventRecord(topic, &evs[i], "")
			if err != nil {
				t.Fatal(err)
			}
			r.Partition = 0
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// wakes reads the committed wakes of both lanes, from the start, until
	// every one of ids is named by one; it returns every wake read, by the
	// event ids they name. Until every one: a fetch may bring one topic's
	// records before the other's, so one id seen says nothing of the
	// other lane's wakes.
	wakes := func(ids ...string) map[string]int {
		t.Helper()
		seen := map[string]int{}
		r, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs...), kgo.ConsumeTopics(names.Wakes(), names.PriorityWakes()),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		defer wcancel()
		missing := func() []string {
			var out []string
			for _, id := range ids {
				if seen[id] == 0 {
					out = append(out, id)
				}
			}
			return out
		}
		for len(missing()) > 0 {
			fs := r.PollFetches(wctx)
			if wctx.Err() != nil {
				t.Fatalf("no committed wake names %v (read %v)", missing(), seen)
			}
			fs.EachRecord(func(rec *kgo.Record) {
				w, err := topics.DecodeWake(rec.Value)
				if err != nil {
					t.Fatalf("wake %s@%d: %v", rec.Topic, rec.Offset, err)
				}
				for _, tr := range w.Triggers {
					if tr.EventID != nil {
						seen[*tr.EventID]++
					}
				}
			})
		}
		return seen
	}
	procs := newChildren(t)
	start := func(name, dataDir string) *child {
		return procs.run(bin, name, "run", "-brokers", strings.Join(b.Addrs, ","), "-topic-prefix", names.Prefix,
			"-data-dir", dataDir, "-group", group, "-instance-id", "prio-test", "-session-timeout", "6s", "-log-level", "info",
			"-http-addr", "127.0.0.1:0")
	}
	dump := procs.dump

	first := start("first", filepath.Join(tmp, "data-1"))
	produce(names.AgentEvents(), ev("root", "conductor", &topics.NodeCreated{Role: topics.RoleConductor}),
		ev("failed-1", "agent-1", &topics.Failed{ErrorCode: "one"}))
	wakes("failed-1")

	// The agent lane's next commit is held at its EndTxn; the human input
	// after it goes out on the priority path all the same.
	hold.Store(true)
	produce(names.AgentEvents(), ev("failed-2", "agent-2", &topics.Failed{ErrorCode: "two"}))
	for !held.Load() {
		select {
		case <-first.exited:
			dump()
			t.Fatalf("the first instance exited: %v", first.err)
		case <-ctx.Done():
			dump()
			t.Fatal("the agent lane's commit never reached its EndTxn")
		case <-time.After(10 * time.Millisecond): // polling the broker's hook, not synchronising
		}
	}
	produce(names.HumanInput(), ev("human-1", "human", &topics.Input{InputID: "in-1", InputKind: "interrupt", Text: "stop"}))
	if seen := wakes("human-1"); seen["failed-2"] != 0 {
		t.Fatalf("the held commit's wake is visible: %v", seen)
	}
	first.kill()
	hold.Store(false)
	closeRelease()

	// The next instance takes over: it fences the agent lane's producer
	// (the held transaction is aborted when released) and the priority
	// path's, restores, and applies the human input again.
	dir := filepath.Join(tmp, "data-1")
	if fresh {
		dir = filepath.Join(tmp, "data-2")
	}
	second := start("second", dir)
	produce(names.AgentEvents(), ev("failed-3", "agent-3", &topics.Failed{ErrorCode: "three"}))
	wakes("failed-3")
	produce(names.AgentEvents(), ev("failed-4", "agent-4", &topics.Failed{ErrorCode: "four"}))
	all := []string{"failed-1", "failed-2", "failed-3", "failed-4", "human-1"}
	seen := wakes(all...)
	for _, id := range all {
		if seen[id] != 1 {
			dump()
			t.Fatalf("%s is named by %d committed wakes, want 1 (all: %v)", id, seen[id], seen)
		}
	}
	select {
	case <-second.exited:
		dump()
		t.Fatalf("the second instance exited: %v", second.err)
	default:
	}
	// And every event's state change is in the run's state once: six
	// events applied, the human input among them.
	m := regexp.MustCompile(`msg="query endpoint listening".* addr=(\S+)`).FindStringSubmatch(second.out.String())
	if m == nil {
		dump()
		t.Fatal("the second instance logged no query endpoint")
	}
	resp, err := http.Get("http://" + strings.Trim(m[1], `"`) + "/internal/v1/runs/" + run + "/read-model")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rm struct {
		Counts struct{ Events, Nodes int }
	}
	if err := json.NewDecoder(resp.Body).Decode(&rm); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("read model: %s, %v", resp.Status, err)
	}
	if rm.Counts.Events != 6 || rm.Counts.Nodes != 6 {
		dump()
		t.Fatalf("read model counts %+v, want 6 events applied once over 6 nodes (conductor, four agents, human)", rm.Counts)
	}
}
