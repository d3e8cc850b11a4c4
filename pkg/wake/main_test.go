package wake_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/canopy-dev/canopy/internal/brokertest"
)

// TestMain fails the package's tests if any goroutine is left running, and
// stops the Apache Kafka node of the broker-matrix tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(brokertest.M(m)) }

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// readAll reads n records of topic from the start, failing after 60s.
func readAll(t *testing.T, brokers []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records of %s: %v", len(out), n, topic, ctx.Err())
		}
		out = append(out, fs.Records()...)
	}
	return out
}
