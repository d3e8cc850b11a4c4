// Command producer-go produces a small tree of agent events for one run to
// canopy with franz-go, building them with pkg/topics, which validates each
// event against the contract before it is sent.
//
//	go run ./examples/producer-go -brokers 127.0.0.1:9092 -run run-go-1
//	go run ./examples/producer-go -dry-run    # print the events as JSON lines
//
// franz-go's default partitioner hashes keys with murmur2 like Kafka's Java
// client and canopy, so a run's records land in its partition with no
// setting (librdkafka clients need partitioner=murmur2_random).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/pkg/topics"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("producer-go", flag.ContinueOnError)
	fs.SetOutput(stderr)
	brokers := fs.String("brokers", "127.0.0.1:9092", "Kafka brokers, host:port[,host:port...]")
	topic := fs.String("topic", topics.DefaultNames().AgentEvents(), "the agent events topic")
	runID := fs.String("run", "run-go-"+strings.ToLower(ulid.Make().String()), "the run id")
	baseTime := fs.String("base-time", "", "RFC 3339 time of the first event (default: now)")
	dryRun := fs.Bool("dry-run", false, "print the events instead of producing them")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	base := time.Now()
	if *baseTime != "" {
		t, err := topics.ParseTime(*baseTime)
		if err != nil {
			fmt.Fprintf(stderr, "producer-go: -base-time: %v\n", err)
			return 2
		}
		base = t.Std()
	}
	evs := Events(*runID, base)
	if *dryRun {
		for _, ev := range evs {
			b, _ := ev.MarshalJSON()
			fmt.Fprintf(stdout, "%s\n", b)
		}
		return 0
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(*brokers, ",")...))
	if err != nil {
		fmt.Fprintf(stderr, "producer-go: %v\n", err)
		return 1
	}
	defer cl.Close()
	// One trace for the run: its wakes' process spans continue it.
	traceID, span := make([]byte, 16), make([]byte, 8)
	rand.Read(traceID)
	var recs []*kgo.Record
	for _, ev := range evs {
		rand.Read(span)
		r, err := topics.EventRecord(*topic, ev, "00-"+hex.EncodeToString(traceID)+"-"+hex.EncodeToString(span)+"-01")
		if err != nil {
			fmt.Fprintf(stderr, "producer-go: event %s: %v\n", ev.ID, err)
			return 1
		}
		recs = append(recs, r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		fmt.Fprintf(stderr, "producer-go: producing to %s: %v\n", *topic, err)
		return 1
	}
	fmt.Fprintf(stderr, "produced %d events of run %s to %s\n", len(evs), *runID, *topic)
	return 0
}

// Events is a conductor delegating to two workers; one finishes, the other
// needs input. Deadlines and leases fall an hour after base.
func Events(runID string, base time.Time) []*topics.Event {
	var out []*topics.Event
	later := topics.NewTime(base.Add(time.Hour))
	ev := func(agent string, after time.Duration, corr string, data topics.Payload) {
		at := base.Add(after)
		out = append(out, &topics.Event{ID: ulid.MustNew(ulid.Timestamp(at), rand.Reader).String(), Source: "/agents/" + agent,
			Type: data.EventType(), Time: topics.NewTime(at), RunID: runID, AgentID: agent, SchemaVersion: topics.CurrentSchemaVersion,
			SessionID: "session-1", CorrelationID: corr, Data: data})
	}
	ms := time.Millisecond
	ev("conductor", 0, "", &topics.NodeCreated{Role: topics.RoleConductor, Capability: "orchestrate"})
	ev("conductor", 100*ms, "", &topics.NodeStatus{Status: topics.StatusRunning, Reason: "planning"})
	ev("worker-1", 201*ms, "task-1", &topics.NodeCreated{Role: topics.RoleWorker, ParentAgentID: "conductor", Capability: "research"})
	ev("worker-1", 301*ms, "task-1", &topics.NodeDelegated{TaskID: "task-1", ExpectedBy: &later})
	ev("worker-2", 202*ms, "task-2", &topics.NodeCreated{Role: topics.RoleWorker, ParentAgentID: "conductor", Capability: "write"})
	ev("worker-2", 302*ms, "task-2", &topics.NodeDelegated{TaskID: "task-2", ExpectedBy: &later})
	ev("worker-1", 400*ms, "task-1", topics.NewLease(topics.TypeLeaseAcquired, topics.Lease{Owner: "pool-1", ExpiresAt: later}))
	ev("worker-1", 500*ms, "task-1", &topics.Progress{Fraction: ptr(0.5)})
	ev("worker-2", 600*ms, "task-2", &topics.Request{RequestID: "req-1", RequestKind: "clarification", DedupeKey: "which-format"})
	ev("worker-1", 700*ms, "task-1", topics.NewResult(topics.TypeResult, topics.Result{ResultKind: "json", Success: ptr(true)}))
	ev("worker-1", 800*ms, "task-1", &topics.NodeCompleted{ResultSource: "completion_event"})
	ev("worker-2", 900*ms, "task-2", &topics.NodeStatus{Status: topics.StatusBlocked, Reason: "waiting_for_input"})
	return out
}

func ptr[T any](v T) *T { return &v }
