package sdk_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/kafkaconn"
	"github.com/canopy-dev/canopy/internal/projector"
	"github.com/canopy-dev/canopy/internal/projectortest"
	"github.com/canopy-dev/canopy/internal/replay"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// partitions is the partition count of the topics the tests create.
const partitions = 4

// TestPythonContract: the Python package follows schema/events. gen.py
// --check passes (the builders and the package's copies of the schemas are
// what gen.py makes of them now: a type or a field added or removed fails
// here), canopy/_contract.py's CONTRACT_SHA256 is the schemas' checksum (so
// a schema change comes with a new package version), and the version's
// major is the events' schemaversion, in pyproject.toml and _contract.py
// alike.
func TestPythonContract(t *testing.T) {
	root := testenv.RepoRoot(t)
	contract := readFile(t, filepath.Join(root, "sdk/python/src/canopy/_contract.py"))
	pyproject := readFile(t, filepath.Join(root, "sdk/python/pyproject.toml"))
	field := func(src, re string) string {
		m := regexp.MustCompile(re).FindStringSubmatch(src)
		if m == nil {
			t.Fatalf("no match for %s", re)
		}
		return m[1]
	}
	sum := schemaSum(t, root)
	if got := field(contract, `(?m)^CONTRACT_SHA256 = "([0-9a-f]+)"`); got != sum {
		t.Errorf("schema/events changed: its SHA-256 is %s, sdk/python/src/canopy/_contract.py's CONTRACT_SHA256 is %s.\n"+
			"Run python3 sdk/python/gen.py, give the package a new version (__version__ in _contract.py and version in "+
			"sdk/python/pyproject.toml; the major is the schemaversion), then set CONTRACT_SHA256 to %s", sum, got, sum)
	}
	version := field(contract, `(?m)^__version__ = "([^"]+)"`)
	if pv := field(pyproject, `(?m)^version = "([^"]+)"`); pv != version {
		t.Errorf("sdk/python/pyproject.toml says version %s, canopy/_contract.py %s", pv, version)
	}
	major := fmt.Sprint(topics.CurrentSchemaVersion)
	if !strings.HasPrefix(version, major+".") {
		t.Errorf("the package's version %s: its major must be the contract's schemaversion %s", version, major)
	}
	if sv := field(contract, `(?m)^SCHEMA_VERSION = (\d+)`); sv != major {
		t.Errorf("canopy/_contract.py's SCHEMA_VERSION is %s, the contract's schemaversion %s", sv, major)
	}
	gen := exec.Command(testenv.PythonVenv(t), filepath.Join(root, "sdk/python/gen.py"), "--check")
	if out, err := gen.CombinedOutput(); err != nil {
		t.Errorf("sdk/python/gen.py --check: %v\n%s", err, out)
	}
}

// schemaSum is the SHA-256 of schema/events/*.json concatenated in name
// order.
func schemaSum(t *testing.T, root string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "schema/events/*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("schema/events: %v (%d files)", err, len(files))
	}
	sort.Strings(files)
	h := sha256.New()
	for _, f := range files {
		h.Write([]byte(readFile(t, f)))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPythonSDK runs the Python package's pytest suite (sdk/python/tests),
// installed from the checkout, on each broker, with canopy's topics
// created and a real projector running on them. The suite gets
//   - CANOPY_BROKERS, CANOPY_PREFIX, CANOPY_PARTITIONS: the broker and the
//     topics;
//   - CANOPY_PARTITION_VECTORS: keys of every length up to 64 bytes
//     (ASCII, multi-byte UTF-8, random bytes) and the partition
//     pkg/topics.Partition gives each among 1 to 1,000 partitions, which the
//     package's murmur2 must match, and the partitions its producer's
//     records land in too;
//   - CANOPY_WAKES: the wakes replay computes for examples/small-run.jsonl,
//     which its conductor tests copy;
//   - CANOPY_RESULTS: a directory where its end-to-end test writes the wakes
//     its conductor received of the run its producer sent.
//
// After the suite, every record on the agent events topic has its run id
// as key, the CloudEvents content type and the partition murmur2 gives its
// key; the projector dead-lettered nothing; and the end-to-end run's read
// model counts its events and one acknowledgement per wake the Python
// conductor received (the projector applied each).
func TestPythonSDK(t *testing.T) { brokertest.Run(t, testPythonSDK) }

func testPythonSDK(t *testing.T, b *brokertest.Broker) {
	root := testenv.RepoRoot(t)
	python := testenv.PythonSDK(t)
	names := topics.Names{Prefix: b.Prefix(t, "pysdk"), Version: 1}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := cluster.CreateTopics(ctx, kadm.NewClient(cl), names, partitions, 1); err != nil {
		t.Fatal(err)
	}
	p, err := projector.New(ctx, projector.Config{Kafka: kafkaconn.Conn{Brokers: b.Addrs}, Names: names, DataDir: t.TempDir(),
		Group: names.Prefix + "-projector", Projection: projection.Config{ForwardGrace: time.Hour}, SessionTimeout: 2 * time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	pctx, stopProjector := context.WithCancel(ctx)
	projected := make(chan error, 1)
	go func() { projected <- p.Run(pctx) }()
	defer func() {
		stopProjector()
		if err := <-projected; err != nil {
			t.Errorf("projector: %v", err)
		}
	}()

	dir := t.TempDir()
	results := filepath.Join(dir, "results")
	if err := os.Mkdir(results, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "console_output_style=classic",
		filepath.Join(root, "sdk/python/tests"))
	cmd.Dir = filepath.Join(root, "sdk/python")
	cmd.Env = append(testenv.EnvWithout("CANOPY_"), "CANOPY_BROKERS="+strings.Join(b.Addrs, ","), "CANOPY_PREFIX="+names.Prefix,
		fmt.Sprintf("CANOPY_PARTITIONS=%d", partitions), "CANOPY_PARTITION_VECTORS="+partitionVectors(t, dir),
		"CANOPY_WAKES="+replayWakes(t, root, dir), "CANOPY_RESULTS="+results)
	var out testenv.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("pytest sdk/python/tests on %s: %v\n%s", b.Kind, err, out.String())
	}
	if testing.Verbose() {
		t.Logf("pytest on %s:\n%s", b.Kind, out.String())
	} else {
		t.Logf("pytest on %s: %s", b.Kind, lastLine(out.String()))
	}

	// The end-to-end run: its events, and an acknowledgement of each wake
	// the conductor received, all applied.
	var e2e struct {
		Run    string   `json:"run"`
		Events int64    `json:"events"`
		Wakes  []string `json:"wakes"`
	}
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(results, "e2e.json"))), &e2e); err != nil {
		t.Fatalf("the end-to-end test's results: %v", err)
	}
	if len(e2e.Wakes) == 0 {
		t.Fatalf("the end-to-end test's conductor received no wake of %s", e2e.Run)
	}
	want := e2e.Events + int64(len(e2e.Wakes))
	testenv.WaitEvery(t, time.Minute, 50*time.Millisecond, func() error {
		m, err := p.ReadModel(ctx, e2e.Run)
		if err != nil {
			return err
		}
		if m.Counts.Events != want {
			return fmt.Errorf("run %s: the projector applied %d events, want %d sent and %d acknowledgements",
				e2e.Run, m.Counts.Events, e2e.Events, len(e2e.Wakes))
		}
		return nil
	})
	if n := p.Status().Counts.DeadLettered; n != 0 {
		t.Errorf("the projector dead-lettered %d records, want none", n)
	}
	recs, err := projectortest.ReadCommitted(ctx, []kgo.Opt{kgo.SeedBrokers(b.Addrs...)}, names.AgentEvents())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		checkRecord(t, r)
	}
}

// checkRecord checks that r is a canopy event keyed by its run id, with the
// CloudEvents content type, in the partition murmur2 gives its key.
func checkRecord(t *testing.T, r *kgo.Record) {
	t.Helper()
	where := fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Offset)
	ev, err := topics.DecodeRecord(r.Key, r.Value, r.Headers)
	if err != nil {
		t.Errorf("%s: %v\n%s", where, err, r.Value)
		return
	}
	if string(r.Key) != ev.RunID {
		t.Errorf("%s: key %q, want the run id %q", where, r.Key, ev.RunID)
	}
	var ct []string
	for _, h := range r.Headers {
		if h.Key == topics.HeaderContentType {
			ct = append(ct, string(h.Value))
		}
	}
	if len(ct) != 1 || ct[0] != topics.ContentTypeCloudEvents {
		t.Errorf("%s (%s): content-type headers %q, want one %q", where, ev.Type, ct, topics.ContentTypeCloudEvents)
	}
	if want := topics.Partition(r.Key, partitions); r.Partition != want {
		t.Errorf("%s (%s of run %s): in partition %d, murmur2 gives %d", where, ev.Type, ev.RunID, r.Partition, want)
	}
}

// partitionVectors writes keys and the partition pkg/topics.Partition gives
// each among several partition counts, as JSON lines of {"key": base64,
// "partitions": n, "partition": p}, and returns the file's path.
func partitionVectors(t *testing.T, dir string) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(35, 1))
	alphabets := []string{"abcdefghijklmnopqrstuvwxyz0123456789-_.:", "é日本語🙂ß∑", ""}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for i := range 3000 {
		n := i % 65
		var key []byte
		switch alpha := alphabets[i%3]; alpha {
		case "":
			key = make([]byte, n)
			for j := range key {
				key[j] = byte(rng.UintN(256))
			}
		default:
			runes := []rune(alpha)
			var s strings.Builder
			for s.Len() < n {
				s.WriteRune(runes[rng.IntN(len(runes))])
			}
			key = []byte(s.String())
		}
		for _, np := range []int32{1, 3, partitions, 7, 64, 1000} {
			if err := enc.Encode(map[string]any{"key": key, "partitions": np, "partition": topics.Partition(key, np)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	p := filepath.Join(dir, "partitions.jsonl")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// replayWakes writes the wakes replay computes for examples/small-run.jsonl
// and returns the file's path.
func replayWakes(t *testing.T, root, dir string) string {
	t.Helper()
	in, err := os.Open(filepath.Join(root, "examples/small-run.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var out bytes.Buffer
	if _, err := replay.Run(in, &out, io.Discard, replay.Options{}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "wakes.jsonl")
	if err := os.WriteFile(p, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndexByte(s, '\n')+1:]
}
