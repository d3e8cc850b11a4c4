package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// BenchmarkFailover measures the time from SIGKILL of a projector process to
// committed wakes flowing again for the partitions it owned. Two processes,
// A and B, share 4 partitions and the state of a backlog (failoverRuns runs);
// A is killed, and at once one probe event that wakes its run is produced to
// each of A's partitions; the time is until B has committed the wake of every
// probe. The baseline is the group session timeout, which alone decides when
// the group notices a dead member: the metric "x_session" is the failover
// time over it. With -standby B keeps A's partitions warm; without, it
// restores them from the changelog.
//
// It runs on each broker of the matrix (CANOPY_TEST_BROKERS), and on Apache
// Kafka once more with KIP-848 groups (-group-protocol consumer, the
// session timeout set as the group's consumer.session.timeout.ms).
func BenchmarkFailover(b *testing.B) {
	for _, kind := range brokertest.Kinds() {
		b.Run(kind, func(b *testing.B) {
			brokers := brokertest.New(b, kind).Addrs
			for _, standby := range []bool{false, true} {
				b.Run(fmt.Sprintf("standby=%v", standby), func(b *testing.B) { benchFailover(b, brokers, standby) })
			}
			if kind == brokertest.Kafka {
				b.Run("kip848", func(b *testing.B) { benchFailover(b, brokers, false, "-group-protocol", "consumer") })
			}
		})
	}
}

const (
	failoverRuns    = 20
	failoverNodes   = 300
	failoverSession = 2 * time.Second
)

func benchFailover(b *testing.B, brokers []string, standby bool, extra ...string) {
	benchMove(b, brokers, false, standby, extra...)
}

// BenchmarkScaleOut measures a scale-out: A owns all 4 partitions and the
// backlog's state; B starts, and the time is from B's start until B has
// committed the wake of a probe produced to each partition the group moved
// to it (the probes go out as soon as the group's assignment names B). It
// runs on Apache Kafka only, with the classic protocol and with KIP-848:
// the rebalance each protocol needs is what differs.
func BenchmarkScaleOut(b *testing.B) {
	brokers := brokertest.SharedKafka(b).Addrs
	b.Run("classic", func(b *testing.B) { benchMove(b, brokers, true, false) })
	b.Run("kip848", func(b *testing.B) { benchMove(b, brokers, true, false, "-group-protocol", "consumer") })
}

// benchMove is BenchmarkFailover (A is killed) and BenchmarkScaleOut (B
// joins).
func benchMove(b *testing.B, brokers []string, scaleOut, standby bool, extra ...string) {
	tmp := b.TempDir()
	bin := filepath.Join(tmp, "projector")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	const partitions = 4
	start := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond) // no timer falls due

	var total time.Duration
	var restored int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		names := topics.Names{Prefix: fmt.Sprintf("failover%d-%d", i, time.Now().UnixNano()), Version: 1}
		group := "g-" + names.Prefix
		if err := cluster.CreateTopics(ctx, adm, names, partitions, 1); err != nil {
			b.Fatal(err)
		}
		// The backlog, and one marker per run whose wake says it is in.
		var recs []*kgo.Record
		add := func(ev *topics.Event) {
			r, err := topics.EventRecord(names.AgentEvents(), ev, "")
			if err != nil {
				b.Fatal(err)
			}
			r.Partition = topics.Partition(r.Key, partitions)
			recs = append(recs, r)
		}
		waitFor := map[string]bool{} // event ids whose wakes are awaited
		wake := func(run, id string, at topics.Time) {
			ev := topics.Event{ID: id, Source: "/agents/probe", Type: (&topics.Failed{}).EventType(), Time: at,
				RunID: run, AgentID: "probe", SchemaVersion: topics.CurrentSchemaVersion, Data: &topics.Failed{ErrorCode: "probe"}}
			add(&ev)
			waitFor[id] = true
		}
		for r := range failoverRuns {
			run := fmt.Sprintf("run-%02d", r)
			evs := workload.Generate(workload.Spec{RunID: run, Nodes: failoverNodes, Seed: uint64(r + 1), Start: start})
			for j := range evs {
				add(&evs[j])
			}
			wake(run, "marker-"+run, evs[len(evs)-1].Time)
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
		reader, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(names.Wakes(), names.PriorityWakes()),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
		if err != nil {
			b.Fatal(err)
		}
		await := func(what string) {
			for len(waitFor) > 0 {
				fs := reader.PollFetches(ctx)
				if ctx.Err() != nil {
					b.Fatalf("waiting for %s: %v (%d wakes missing)", what, ctx.Err(), len(waitFor))
				}
				fs.EachRecord(func(r *kgo.Record) {
					w, err := topics.DecodeWake(r.Value)
					if err != nil {
						b.Fatal(err)
					}
					for _, tr := range w.Triggers {
						if tr.EventID != nil {
							delete(waitFor, *tr.EventID)
						}
					}
				})
			}
		}

		startChild := func(name string) *child {
			c := &child{name: name, exited: make(chan struct{})}
			args := []string{"run", "-brokers", strings.Join(brokers, ","), "-topic-prefix", names.Prefix,
				"-data-dir", filepath.Join(tmp, fmt.Sprintf("%s-%d", name, i)), "-group", group,
				"-session-timeout", failoverSession.String(), "-advertise-addr", name + ":1", "-log-level", "warn", "-http-addr", "127.0.0.1:0"}
			if standby {
				args = append(args, "-standby")
			}
			args = append(args, extra...)
			c.cmd = exec.Command(bin, args...)
			c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
			if err := c.cmd.Start(); err != nil {
				b.Fatal(err)
			}
			go func() { c.err = c.cmd.Wait(); close(c.exited) }()
			return c
		}
		// owned returns the partitions the group has assigned to member,
		// once every partition is assigned.
		owned := func(member string) []int32 {
			var mine []int32
			for len(mine) == 0 {
				assign, err := cluster.Assignment(ctx, adm, group, names)
				if err != nil {
					b.Fatal(err)
				}
				mine = mine[:0]
				for part, m := range assign {
					if m.Addr == member {
						mine = append(mine, part)
					}
				}
				if len(assign) != partitions {
					mine = nil
				}
				if ctx.Err() != nil {
					b.Fatalf("waiting for %s to own partitions: %v", member, ctx.Err())
				}
			}
			return mine
		}
		a := startChild("a")
		var bb *child
		if !scaleOut {
			bb = startChild("b")
		}
		await("the backlog's markers")
		var began time.Time
		var mine []int32
		if scaleOut {
			owned("a:1")
			b.StartTimer()
			began = time.Now()
			bb = startChild("b")
			mine = owned("b:1")
		} else {
			mine = owned("a:1") // A's partitions, as the group says
		}
		// The probes: one run per partition of A's.
		recs = recs[:0]
		probeAt := topics.NewTime(start.Add(24 * time.Hour))
		for _, part := range mine {
			for n := 0; ; n++ {
				run := fmt.Sprintf("probe-%d-%d", part, n)
				if topics.Partition([]byte(run), partitions) == part {
					wake(run, "probe-"+run, probeAt)
					break
				}
			}
		}

		if !scaleOut {
			b.StartTimer()
			began = time.Now()
			a.kill()
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
		await("the probes' wakes")
		took := time.Since(began)
		b.StopTimer()

		total += took
		restored += len(mine)
		a.kill()
		bb.kill()
		reader.Close()
		cancel()
		b.StartTimer()
	}
	unit := "failover_ms"
	if scaleOut {
		unit = "scaleout_ms"
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), unit)
	b.ReportMetric(total.Seconds()/float64(b.N)/failoverSession.Seconds(), "x_session")
	b.ReportMetric(float64(restored)/float64(b.N), "partitions_moved")
}
