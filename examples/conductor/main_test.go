package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/replay"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestMain fails the package's tests if any goroutine is left running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestConductorLogsWakes: the example conductor, pointed at a broker with
// the wakes of examples/small-run.jsonl waiting, logs one line per wake,
// the priority lane's first, and stops when its context ends.
func TestConductorLogsWakes(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	brokers := kc.ListenAddrs()
	names := topics.Names{Prefix: "conductortest", Version: 1}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cluster.CreateTopics(ctx, kadm.NewClient(cl), names, 2, 1); err != nil {
		t.Fatal(err)
	}
	in, err := os.ReadFile("../small-run.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var wakes bytes.Buffer
	if _, err := replay.Run(bytes.NewReader(in), &wakes, io.Discard, replay.Options{}); err != nil {
		t.Fatal(err)
	}
	n := 0
	for sc := bufio.NewScanner(&wakes); sc.Scan(); n++ {
		w, err := topics.DecodeWake(sc.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: names.WakeTopic(w.Lane), Key: []byte(w.RunID), Value: bytes.Clone(sc.Bytes())}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	var out, errOut testenv.Buffer
	runCtx, stop := context.WithCancel(ctx)
	code := make(chan int, 1)
	go func() {
		code <- run(runCtx, []string{"-brokers", strings.Join(brokers, ","), "-topic-prefix", names.Prefix, "-group", "example"}, &out, &errOut)
	}()
	for strings.Count(out.String(), "\n") < n {
		select {
		case c := <-code:
			t.Fatalf("conductor exited with %d:\n%s", c, errOut.String())
		case <-ctx.Done():
			t.Fatalf("%d of %d wakes logged:\n%s\n%s", strings.Count(out.String(), "\n"), n, out.String(), errOut.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	stop()
	if c := <-code; c != 0 {
		t.Fatalf("exit code %d:\n%s", c, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if !regexp.MustCompile(`^\S+ WAKE! \S+ run=run-demo-1 seq=\d+ triggers=\[human_input:\S+ ".+"\] nodes=\d+/\d+ `).MatchString(lines[0]) {
		t.Errorf("first line is not the priority wake:\n%s", out.String())
	}
	if !regexp.MustCompile(`wake  \S+ run=run-demo-1 seq=\d+ triggers=\[result:`).MatchString(out.String()) {
		t.Errorf("no result wake:\n%s", out.String())
	}
}
