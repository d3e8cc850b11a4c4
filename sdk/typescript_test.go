package sdk_test

// The TypeScript package, sdk/typescript (@canopy/agents), held to Go's
// own code: its node:test suites run here (the broker ones against kfake
// and Apache Kafka), and what it computes is compared with what pkg/topics,
// pkg/ids and pkg/wake compute.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/projectortest"
	"github.com/canopy-dev/canopy/internal/replay"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/topics"
	"github.com/canopy-dev/canopy/pkg/wake"
)

// TestTypeScriptContract fails when schema/events changes without the
// package following, naming what to update:
//   - src/events.ts, src/schemas.ts and src/wakes.ts are what
//     scripts/generate.js writes from schema/ now (a type or a field gained
//     or lost is a builder or a payload field gained or lost);
//   - src/contract.ts records the SHA-256 of schema/events/*.json
//     (concatenated in name order) the package was last checked against;
//   - package.json's version is src/contract.ts's VERSION, whose major is
//     the events' schemaversion (envelope.schema.json's const).
func TestTypeScriptContract(t *testing.T) {
	root := testenv.RepoRoot(t)
	dir := filepath.Join(root, "sdk/typescript")
	node := testenv.Tool(t, "node")
	if out, err := exec.Command(node, filepath.Join(dir, "scripts/generate.js"), "--check").CombinedOutput(); err != nil {
		t.Errorf("scripts/generate.js --check: %v\n%s", err, out)
	}

	files, err := filepath.Glob(filepath.Join(root, "schema/events/*.json"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		h.Write(b)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	contract, err := os.ReadFile(filepath.Join(dir, "src/contract.ts"))
	if err != nil {
		t.Fatal(err)
	}
	constant := func(name string) string {
		m := regexp.MustCompile(`export const ` + name + ` = "?([^";]*)"?;`).FindSubmatch(contract)
		if m == nil {
			t.Fatalf("sdk/typescript/src/contract.ts has no %s", name)
		}
		return string(m[1])
	}
	if got := constant("CONTRACT_SHA256"); got != sum {
		t.Errorf("schema/events changed (SHA-256 %s, sdk/typescript/src/contract.ts says %s): run `npm run generate` in sdk/typescript, "+
			"check the builders and validation follow, set CONTRACT_SHA256 to the new sum, and raise VERSION in src/contract.ts and package.json "+
			"(the major when schemaversion changes)", sum, got)
	}
	var envelope struct {
		Properties struct {
			SchemaVersion struct {
				Const int `json:"const"`
			} `json:"schemaversion"`
		} `json:"properties"`
	}
	readJSON(t, filepath.Join(root, "schema/events/envelope.schema.json"), &envelope)
	var pkg struct{ Name, Version string }
	readJSON(t, filepath.Join(dir, "package.json"), &pkg)
	version := constant("VERSION")
	if pkg.Name != "@canopy/agents" || pkg.Version != version {
		t.Errorf("sdk/typescript/package.json is %s %s, want @canopy/agents %s (src/contract.ts's VERSION)", pkg.Name, pkg.Version, version)
	}
	major := fmt.Sprint(envelope.Properties.SchemaVersion.Const)
	if !strings.HasPrefix(version, major+".") || constant("SCHEMA_VERSION") != major {
		t.Errorf("sdk/typescript's VERSION %s and SCHEMA_VERSION %s: want the major and the schema version %s, envelope.schema.json's schemaversion",
			version, constant("SCHEMA_VERSION"), major)
	}
}

// TestTypeScriptSDK runs the package's node:test suites, the broker ones
// once per broker, and compares what the package computes with Go's code:
//   - partition, for thousands of keys and partition counts, is
//     topics.Partition, and so is kafkajs's DefaultPartitioner;
//   - validate accepts exactly what the projector's decoder
//     (topics.DecodeEvent) accepts of what the package would send, over
//     every example event mutated field by field;
//   - ackEvent is wake.AckEvent, byte for byte once decoded, for every
//     wake replay computes from examples/small-run.jsonl and variants;
//   - every event the package's producer suite sends, one of each type, is
//     decoded by topics.DecodeRecord, keyed by its run, in the partition
//     topics.Partition gives its run.
func TestTypeScriptSDK(t *testing.T) {
	ts := buildTypeScript(t)

	t.Run("unit", func(t *testing.T) { ts.runTests(t, nil, ts.tests(t, false)...) })
	t.Run("partition", func(t *testing.T) { testTypeScriptPartition(t, ts) })
	t.Run("validate", func(t *testing.T) { testTypeScriptValidate(t, ts) })
	t.Run("ack", func(t *testing.T) { testTypeScriptAck(t, ts) })
	brokertest.Run(t, func(t *testing.T, b *brokertest.Broker) { testTypeScriptKafka(t, ts, b) })
}

// typeScript is the package and its tests built into a directory of the
// test's own (never the checkout's dist/).
type typeScript struct {
	root, node, out string
	env             []string
}

func buildTypeScript(t *testing.T) *typeScript {
	t.Helper()
	root := testenv.RepoRoot(t)
	dir := filepath.Join(root, "sdk/typescript")
	node := testenv.Tool(t, "node")
	tsc := filepath.Join(dir, "node_modules/typescript/bin/tsc")
	if _, err := os.Stat(tsc); err != nil {
		testenv.Missing(t, "sdk/typescript/node_modules (npm ci in sdk/typescript)")
	}
	out := t.TempDir()
	if b, err := exec.Command(node, tsc, "-p", filepath.Join(dir, "tsconfig.test.json"), "--outDir", out).CombinedOutput(); err != nil {
		t.Fatalf("tsc -p sdk/typescript/tsconfig.test.json: %v\n%s", err, b)
	}
	// The built package is outside sdk/typescript: kafkajs is found through NODE_PATH.
	env := append(testenv.EnvWithout("CANOPY_"), "NODE_PATH="+filepath.Join(dir, "node_modules"), "CANOPY_REPO="+root)
	return &typeScript{root: root, node: node, out: out, env: env}
}

// tests returns the built suites: the broker ones (*.kafka.test.js) or the others.
func (ts *typeScript) tests(t *testing.T, kafka bool) []string {
	t.Helper()
	all, err := filepath.Glob(filepath.Join(ts.out, "test/*.test.js"))
	if err != nil || len(all) == 0 {
		t.Fatalf("no test suites built in %s: %v", ts.out, err)
	}
	var out []string
	for _, f := range all {
		if strings.HasSuffix(f, ".kafka.test.js") == kafka {
			out = append(out, f)
		}
	}
	return out
}

// runTests runs node:test suites, failing with their report if one fails.
func (ts *typeScript) runTests(t *testing.T, env []string, files ...string) {
	t.Helper()
	cmd := exec.Command(ts.node, append([]string{"--test", "--test-reporter=spec", "--test-concurrency=1"}, files...)...)
	cmd.Env = append(append(slices.Clone(ts.env), env...), "CI=true") // a suite without its broker fails
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test %s: %v\n%s", strings.Join(files, " "), err, out)
	}
	t.Logf("%s", out)
}

// probe sends test/probe.js one question per line and returns its answers.
func (ts *typeScript) probe(t *testing.T, questions []map[string]any) []map[string]any {
	t.Helper()
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for _, q := range questions {
		if err := enc.Encode(q); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(ts.node, filepath.Join(ts.out, "test/probe.js"))
	cmd.Env, cmd.Stdin = ts.env, &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, stderr.String())
	}
	var answers []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var a map[string]any
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			t.Fatalf("probe answered %q: %v", sc.Text(), err)
		}
		answers = append(answers, a)
	}
	if len(answers) != len(questions) {
		t.Fatalf("probe answered %d of %d questions", len(answers), len(questions))
	}
	return answers
}

func testTypeScriptPartition(t *testing.T, ts *typeScript) {
	rng := rand.New(rand.NewPCG(35, 2))
	keys := [][]byte{{}, []byte("run-1"), []byte("run-ts"), []byte("é"), []byte("运行-7"), []byte("🌳 run"), {0xff, 0x00, 0x80}}
	for i := range 1000 {
		keys = append(keys, fmt.Appendf(nil, "run-%d", i))
	}
	for range 1000 {
		k := make([]byte, rng.IntN(41))
		for j := range k {
			k[j] = byte(rng.IntN(256))
		}
		keys = append(keys, k)
	}
	ns := []int32{1, 2, 3, 4, 7, 12, 32, 100, 1000}
	var qs []map[string]any
	for i, k := range keys {
		qs = append(qs, map[string]any{"op": "partition", "key": base64.StdEncoding.EncodeToString(k), "n": ns[i%len(ns)]})
	}
	wrong := 0
	for i, a := range ts.probe(t, qs) {
		want := float64(topics.Partition(keys[i], ns[i%len(ns)]))
		if (a["sdk"] != want || a["kafkajs"] != want) && wrong < 20 {
			wrong++
			t.Errorf("key %q of %d partitions: the package places it in %v, kafkajs's DefaultPartitioner in %v, topics.Partition in %v",
				keys[i], ns[i%len(ns)], a["sdk"], a["kafkajs"], want)
		}
	}
}

// mutations are values a producer gets wrong (schema/differential_test.go
// has the same list for the schemas).
var mutations = []struct {
	name  string
	value any
}{
	{"absent", absent}, {"empty", ""}, {"null", nil}, {"zero", 0}, {"one", 1}, {"minus one", -1}, {"a fraction", 1.5},
	{`"1"`, "1"}, {"true", true}, {"an empty array", []any{}}, {"an array of one string", []any{"x"}}, {"an empty object", map[string]any{}},
	{"a plain string", "worker-7"}, {"a control character", "a\x01b"}, {"a line separator", "a\u2028b"}, {"257 bytes", strings.Repeat("a", 257)},
	{"256 two-byte characters", strings.Repeat("é", 256)}, {"257 emoji", strings.Repeat("😀", 257)}, {"513 bytes", strings.Repeat("a", 513)},
	{"a time", "2026-02-14T10:00:01Z"}, {"a time with an offset", "2026-02-14T11:00:01+01:00"},
	{"a fractional time", "2026-02-14T10:00:01.123456789Z"}, {"the zero instant", "0001-01-01T00:00:00.000Z"}, {"february 30th", "2026-02-30T10:00:00Z"},
	{"a time in year 10000 in UTC", "9999-12-31T23:30:00-01:00"}, {"a huge number", 1e300}, {"2^63", 9223372036854775808.0}, {"2^62", 4611686018427387904.0},
	{"a relative path", "/agents/worker-7"}, {"an absolute URI", "https://canopy.dev/schemas/x"}, {"a space", "a b"},
	{"a colon first", ":x"}, {"a bad escape", "x%zz"}, {"a host with a space", "http://a b/"}, {"a bad port", "http://h:port/"},
	{"an IPv4 literal", "http://[1.2.3.4]/"}, {"an IPv6 literal", "http://[::1]:80/"}, {"an IPv6 zone", "http://[fe80::1%25en0]/"},
	{"a backslash", `a\b`}, {"an opaque URI", "urn:canopy:x"}, {"a colon in the first segment", "1a:b"},
}

var absent = &struct{}{}

func testTypeScriptValidate(t *testing.T, ts *typeScript) {
	var names []string
	var qs []map[string]any
	add := func(name string, doc map[string]any) {
		b, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
		qs = append(qs, map[string]any{"op": "validate", "doc": string(b)})
	}
	for _, et := range topics.EventTypes() {
		var base map[string]any
		readJSON(t, filepath.Join(ts.root, "schema/examples", string(et)+".json"), &base)
		add(string(et), base)
		keys := slices.Sorted(mapsKeys(base))
		for _, k := range []string{"dataschema", "subject", "datacontenttype", "sessionid", "threadid", "correlationid", "causationid"} {
			if _, ok := base[k]; !ok {
				keys = append(keys, k)
			}
		}
		mutate := func(name string, set func(doc map[string]any, v any)) {
			for _, m := range mutations {
				doc := cloneJSON(t, base)
				set(doc, m.value)
				add(fmt.Sprintf("%s: %s %s", et, name, m.name), doc)
			}
		}
		for _, k := range keys {
			mutate(k, func(doc map[string]any, v any) {
				if v == absent {
					delete(doc, k)
				} else {
					doc[k] = v
				}
			})
		}
		data, _ := base["data"].(map[string]any)
		for _, k := range slices.Sorted(mapsKeys(data)) {
			mutate("data."+k, func(doc map[string]any, v any) {
				d := doc["data"].(map[string]any)
				if v == absent {
					delete(d, k)
				} else {
					d[k] = v
				}
			})
		}
		mutate("data.unknown", func(doc map[string]any, v any) {
			if v != absent {
				doc["data"].(map[string]any)["unknown_field"] = v
			}
		})
	}
	answers := ts.probe(t, qs)
	disagree := 0
	for i, a := range answers {
		wire := a["wire"].(string)
		_, derr := topics.DecodeEvent([]byte(wire))
		problems := a["problems"].([]any)
		if (derr == nil) != (len(problems) == 0) {
			disagree++
			if disagree <= 20 {
				t.Errorf("%s: the package's validate says %v, the projector's decoder %v\n%s", names[i], problems, derr, clip(wire))
			}
		}
	}
	if disagree > 20 {
		t.Errorf("... %d disagreements in all, of %d events", disagree, len(answers))
	}
	t.Logf("%d events judged alike by validate and topics.DecodeEvent", len(answers)-disagree)
}

func testTypeScriptAck(t *testing.T, ts *typeScript) {
	in, err := os.ReadFile(filepath.Join(ts.root, "examples/small-run.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := replay.Run(bytes.NewReader(in), &out, io.Discard, replay.Options{}); err != nil {
		t.Fatal(err)
	}
	var wakes []*topics.Wake
	for line := range strings.Lines(out.String()) {
		w, err := topics.DecodeWake([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		wakes = append(wakes, w)
	}
	if len(wakes) < 3 {
		t.Fatalf("replay of small-run.jsonl gives %d wakes", len(wakes))
	}
	// Variants: a wake id that is not a ULID (the ack's time is then the
	// acknowledgement's), in lower case, no root, a thread.
	session, thread := "session-x", "thread-x"
	for i, change := range []func(w *topics.Wake){
		func(w *topics.Wake) { w.WakeID = "not-a-ulid" },
		func(w *topics.Wake) { w.WakeID = strings.ToLower(w.WakeID) },
		func(w *topics.Wake) { w.AgentTreeSnapshot.RootAgentID = nil },
		func(w *topics.Wake) {
			w.AgentTreeSnapshot.Scope.SessionID, w.AgentTreeSnapshot.Scope.ThreadID = &session, &thread
		},
	} {
		w, _ := topics.DecodeWake(marshalWake(t, wakes[i%len(wakes)]))
		change(w)
		wakes = append(wakes, w)
	}
	at := time.Date(2026, 2, 14, 11, 0, 0, 123_000_000, time.UTC)
	const source, agent = "/conductors/my-conductor", "fallback-agent"
	var qs []map[string]any
	for _, w := range wakes {
		qs = append(qs, map[string]any{"op": "ack", "wake": string(marshalWake(t, w)), "source": source, "agent": agent, "at": at.UnixMilli()})
	}
	for i, a := range ts.probe(t, qs) {
		want, err := wake.AckEvent(wakes[i], source, agent, at).MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var got, exp map[string]any
		if err := json.Unmarshal([]byte(a["event"].(string)), &got); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(want, &exp); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, exp) {
			t.Errorf("wake %s: the package acknowledges with\n%s\npkg/wake with\n%s", wakes[i].WakeID, a["event"], want)
		}
	}
}

func testTypeScriptKafka(t *testing.T, ts *typeScript, b *brokertest.Broker) {
	const partitions = 4
	names := topics.Names{Prefix: b.Prefix(t, "tssdk"), Version: 1}
	cl, err := kgo.NewClient(b.Opts()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := cluster.CreateTopics(ctx, kadm.NewClient(cl), names, partitions, 1); err != nil {
		t.Fatal(err)
	}
	ts.runTests(t, []string{"CANOPY_BROKERS=" + strings.Join(b.Addrs, ","), "CANOPY_PREFIX=" + names.Prefix}, ts.tests(t, true)...)

	// What the producer suite sent to this prefix: one event of each type.
	recs, err := projectortest.ReadCommitted(ctx, b.Opts(), names.AgentEvents())
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(topics.EventTypes()) {
		t.Errorf("%d records on %s, want one per event type (%d)", len(recs), names.AgentEvents(), len(topics.EventTypes()))
	}
	types := map[topics.EventType]bool{}
	for _, r := range recs {
		ev, err := topics.DecodeRecord(r.Key, r.Value, r.Headers)
		if err != nil {
			t.Errorf("%s/%d@%d: the projector's decoder refuses it: %v\n%s", r.Topic, r.Partition, r.Offset, err, r.Value)
			continue
		}
		types[ev.Type] = true
		if string(r.Key) != ev.RunID {
			t.Errorf("%s of %s: key %q, want the run id", ev.Type, ev.RunID, r.Key)
		}
		if want := topics.Partition(r.Key, partitions); r.Partition != want {
			t.Errorf("%s of %s: in partition %d, topics.Partition says %d", ev.Type, ev.RunID, r.Partition, want)
		}
		var ct []string
		for _, h := range r.Headers {
			if h.Key == topics.HeaderContentType {
				ct = append(ct, string(h.Value))
			}
		}
		if !slices.Equal(ct, []string{topics.ContentTypeCloudEvents}) {
			t.Errorf("%s of %s: content-type headers %q", ev.Type, ev.RunID, ct)
		}
	}
	for _, et := range topics.EventTypes() {
		if !types[et] {
			t.Errorf("no %s event decoded", et)
		}
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func cloneJSON(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	var out map[string]any
	if err := json.Unmarshal(mustMarshal(t, m), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func marshalWake(t *testing.T, w *topics.Wake) []byte {
	t.Helper()
	b, err := topics.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mapsKeys(m map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func clip(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}
