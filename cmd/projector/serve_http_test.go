package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestRunServesQueries: "projector run -http-addr -query-secret-file"
// serves the query endpoint of the instance Serve runs: ready once it owns
// its partitions, the snapshot of a run it projected to a caller with the
// secret only (401 without it or with another), /metrics to anyone and
// without the run's id, and on SIGTERM it stops gracefully, the HTTP server
// with it.
func TestRunServesQueries(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	brokers := kc.ListenAddrs()
	names := topics.Names{Prefix: "httptest", Version: 1}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cluster.CreateTopics(ctx, kadm.NewClient(cl), names, 2, 1); err != nil {
		t.Fatal(err)
	}
	addr := testenv.FreeAddr(t)
	secret := "a-query-secret-of-the-test-0123456789abcdef"
	secretFile := filepath.Join(t.TempDir(), "query-secret")
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	var out testenv.Buffer
	code := make(chan int, 1)
	go func() {
		code <- runProjector([]string{"-brokers", strings.Join(brokers, ","), "-topic-prefix", names.Prefix,
			"-data-dir", t.TempDir(), "-group", "httptest", "-session-timeout", "2s", "-http-addr", addr,
			"-advertise-addr", addr, "-log-level", "info", "-query-secret-file", secretFile}, &out)
	}()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	getAs := func(path, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	get := func(path string) (int, string) { return getAs(path, "") }
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		testenv.WaitFor(t, 60*time.Second, func() error {
			select {
			case c := <-code:
				t.Fatalf("projector run exited with %d:\n%s", c, out.String())
			default:
			}
			if cond() {
				return nil
			}
			return fmt.Errorf("%s; output:\n%s", what, out.String())
		})
	}
	waitUntil("ready", func() bool { c, _ := get("/readyz"); return c == http.StatusOK })
	if c, body := get("/healthz"); c != http.StatusOK {
		t.Errorf("healthz: %d %s", c, body)
	}

	ev := topics.Event{ID: "ev-1", Source: "/agents/root", Type: topics.TypeNodeCreated, Time: topics.NewTime(time.Now()),
		RunID: "run-http", AgentID: "root", SchemaVersion: topics.CurrentSchemaVersion,
		Data: &topics.NodeCreated{Role: topics.RoleConductor}}
	rec, err := topics.EventRecord(names.AgentEvents(), &ev, "")
	if err != nil {
		t.Fatal(err)
	}
	rec.Partition = topics.Partition(rec.Key, 2)
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var body string
	waitUntil("the run's snapshot", func() bool {
		var c int
		c, body = getAs("/internal/v1/runs/run-http/snapshot", secret)
		return c == http.StatusOK
	})
	var snap topics.AgentTreeSnapshot
	if err := json.Unmarshal([]byte(body), &snap); err != nil || snap.AsOfEventSeq != 1 || snap.Scope.RunID != "run-http" {
		t.Errorf("snapshot: %v %s", err, body)
	}
	for _, token := range []string{"", "not-" + secret} {
		if c, body := getAs("/internal/v1/runs/run-http/snapshot", token); c != http.StatusUnauthorized || strings.Contains(body, `"nodes"`) {
			t.Errorf("snapshot with token %q: %d %s, want 401", token, c, body)
		}
	}
	// /metrics is open, and says nothing of any run.
	if c, body := get("/metrics"); c != http.StatusOK || !strings.Contains(body, "canopy_") || strings.Contains(body, "run-http") {
		t.Errorf("metrics without the secret: %d, canopy_ metrics %v, the run's id in them %v", c, strings.Contains(body, "canopy_"), strings.Contains(body, "run-http"))
	}

	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("projector run exited with %d:\n%s", c, out.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("projector run did not stop on SIGTERM:\n%s", out.String())
	}
	if c, _ := get("/healthz"); c != 0 {
		t.Errorf("the query endpoint still answers after the process stopped: %d", c)
	}
}
