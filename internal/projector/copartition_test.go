package projector

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/kafkaconn"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestRefusesTopicsNotCoPartitioned: New refuses to start, with an error
// wrapping ErrNotCoPartitioned that says what to fix, when the topics are
// missing or when one of them has another partition count (the design card,
// "Topics"); once they agree it starts.
func TestRefusesTopicsNotCoPartitioned(t *testing.T) {
	c := brokertest.NewKfake(t).Cluster
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	names := topics.Names{Prefix: "copart", Version: 1}
	dir := t.TempDir() // one data dir throughout: a refused New must release it
	cfg := Config{Kafka: kafkaconn.Conn{Brokers: c.ListenAddrs()}, Names: names, DataDir: dir, Group: "g-copart",
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	refused := func(what string) string {
		t.Helper()
		p, err := New(ctx, cfg)
		if err == nil {
			done, stop := context.WithCancel(ctx)
			stop()
			p.Run(done)
			t.Fatalf("%s: New started", what)
		}
		if !errors.Is(err, ErrNotCoPartitioned) {
			t.Fatalf("%s: New: %v, want ErrNotCoPartitioned", what, err)
		}
		t.Logf("%s: %v", what, err)
		return err.Error()
	}
	coPartitioned := []string{names.AgentEvents(), names.HumanInput(), names.Changelog(), names.Wakes(), names.PriorityWakes()}

	// Nothing exists yet: every co-partitioned topic is named as missing,
	// with how to create them.
	msg := refused("no topics")
	for _, name := range coPartitioned {
		if !strings.Contains(msg, name) {
			t.Errorf("missing topics: %q does not name %s", msg, name)
		}
	}
	if !strings.Contains(msg, "missing") || !strings.Contains(msg, "create-topics") {
		t.Errorf("missing topics: %q does not say they are missing and how to create them", msg)
	}

	// The human input topic alone, with 3 partitions: the others are missing.
	resp, err := adm.CreateTopic(ctx, 3, 1, nil, names.HumanInput())
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	msg = refused("only the human input topic")
	if strings.Contains(msg, names.HumanInput()) || !strings.Contains(msg, names.AgentEvents()) {
		t.Errorf("partly missing: %q should name the missing topics and only them", msg)
	}

	// Everything else with 4 partitions: the odd one is named with both
	// counts.
	if err := cluster.CreateTopics(ctx, adm, names, 4, 1); err != nil {
		t.Fatal(err)
	}
	msg = refused("human input with 3 partitions, the rest with 4")
	for _, want := range []string{names.AgentEvents() + " has 4 partitions", names.HumanInput() + " has 3", "give them all 4 partitions"} {
		if !strings.Contains(msg, want) {
			t.Errorf("not co-partitioned: %q does not say %q", msg, want)
		}
	}
	for _, name := range []string{names.Changelog(), names.Wakes(), names.PriorityWakes()} {
		if strings.Contains(msg, name) {
			t.Errorf("not co-partitioned: %q blames %s, which agrees with the agent events topic", msg, name)
		}
	}

	// Fixed by adding a partition: New starts (and CheckTopics agrees).
	if resp, err := adm.UpdatePartitions(ctx, 4, names.HumanInput()); err != nil || resp.Error() != nil {
		t.Fatal(err, resp.Error())
	}
	p, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("co-partitioned topics refused: %v", err)
	}
	if p.Partitions() != 4 {
		t.Errorf("Partitions() = %d, want 4", p.Partitions())
	}
	// The group client joins as soon as New creates it, so partitions may be
	// assigned before Run, even while New is still setting up.
	testenv.WaitFor(t, 10*time.Second, until(p, "partitions assigned", func() bool { return len(p.Owned()) == 4 }))
	// Run with a context already done shuts down cleanly at once.
	done, stop := context.WithCancel(ctx)
	stop()
	if err := p.Run(done); err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
}

// TestCreateTopicsThenStart: a projector started the moment CreateTopics
// returns finds every topic, on both brokers. Apache Kafka acknowledges a
// creation before its metadata lists the topic (seen: the bench's first
// projector refused to start, a topic "missing"); CreateTopics waits for it.
func TestCreateTopicsThenStart(t *testing.T) {
	brokertest.Run(t, func(t *testing.T, b *brokertest.Broker) {
		cl, err := kgo.NewClient(b.Opts()...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		for range 5 {
			names := topics.Names{Prefix: b.Prefix(t, "created"), Version: 1}
			if err := cluster.CreateTopics(ctx, kadm.NewClient(cl), names, 6, 1); err != nil {
				t.Fatal(err)
			}
			// A fresh client, as a projector process has.
			fresh, err := kgo.NewClient(b.Opts()...)
			if err != nil {
				t.Fatal(err)
			}
			n, err := cluster.CheckTopics(ctx, kadm.NewClient(fresh), names)
			fresh.Close()
			if err != nil || n != 6 {
				t.Fatalf("right after CreateTopics: CheckTopics = %d, %v", n, err)
			}
		}
	})
}
