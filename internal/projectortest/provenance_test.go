package projectortest

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
)

// TestDumpChangelog: the listing CheckState keeps for a mismatch, and the
// timeline it logs, tell a committed record from an aborted one and show
// the markers, with the producer that wrote each.
func TestDumpChangelog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := brokertest.NewKfake(t)
	const topic = "dump"
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs...), kgo.TransactionalID("dump-txn"), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	for _, txn := range []struct {
		key string
		end kgo.TransactionEndTry
	}{{"kept", kgo.TryCommit}, {"undone", kgo.TryAbort}} {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte(txn.key), Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := cl.EndTransaction(ctx, txn.end); err != nil {
			t.Fatal(err)
		}
	}
	path, err := dumpChangelog(ctx, []kgo.Opt{kgo.SeedBrokers(b.Addrs...)}, topic, 0, t.TempDir(), "x/y")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 5 { // the header, two records, two markers
		t.Fatalf("%d lines, want 5:\n%s", len(lines), data)
	}
	for i, want := range []string{`committed "kept"`, "marker", `aborted "undone"`, "marker"} {
		if !strings.Contains(lines[i+1], want) {
			t.Errorf("line %d: %q, want %q in it", i+1, lines[i+1], want)
		}
	}
	if strings.Contains(path, "x/y") {
		t.Errorf("the test name was not made a file name: %s", path)
	}

	// The timeline CheckState logs: a line per run of records of one
	// producer, epoch and fate, markers apart.
	tl, err := timeline(ctx, []kgo.Opt{kgo.SeedBrokers(b.Addrs...)}, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(tl) != 4 {
		t.Fatalf("timeline of %d lines, want 4:\n%s", len(tl), strings.Join(tl, "\n"))
	}
	for i, want := range []string{`0-0 pid`, "1-1 pid", `2-2 pid`, "3-3 pid"} {
		if !strings.HasPrefix(tl[i], want) {
			t.Errorf("timeline line %d: %q, want it to start %q", i, tl[i], want)
		}
	}
	for i, want := range []string{`committed n=1 "kept".."kept"`, "marker", `aborted n=1 "undone".."undone"`, "marker"} {
		if !strings.Contains(tl[i], want) {
			t.Errorf("timeline line %d: %q, want %q in it", i, tl[i], want)
		}
	}
}
