package topics_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// encodingJSON is the reference the wake path's own encoders must equal
// byte for byte: encoding/json, compact, HTML escaping off, the Encoder's
// newline trimmed.
func encodingJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// sameAsEncodingJSON fails unless Marshal and AppendJSON encode v (a *Wake,
// *AgentTreeSnapshot or *NodeDigest) to encoding/json's bytes.
func sameAsEncodingJSON(t *testing.T, name string, v any) {
	t.Helper()
	want, err := encodingJSON(v)
	if err != nil {
		t.Fatalf("%s: encoding/json: %v", name, err)
	}
	got, err := topics.Marshal(v)
	if err != nil {
		t.Fatalf("%s: Marshal: %v", name, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: Marshal differs from encoding/json at byte %d:\n got  %s\n want %s", name, firstByteDiff(got, want), around(got, want), around(want, got))
	}
	prefix := []byte("prefix")
	var app []byte
	switch x := v.(type) {
	case *topics.Wake:
		app, err = x.AppendJSON(prefix)
	case *topics.AgentTreeSnapshot:
		app, err = x.AppendJSON(prefix)
	case *topics.NodeDigest:
		app, err = x.AppendJSON(prefix)
	default:
		t.Fatalf("%s: %T has no AppendJSON", name, v)
	}
	if err != nil || !bytes.Equal(app, append(prefix, want...)) {
		t.Fatalf("%s: AppendJSON gives %q, %v", name, app, err)
	}
	if w, ok := v.(*topics.Wake); ok {
		wakeAround(t, name, w, want)
	}
}

// wakeAround fails unless WakeJSONAround writes w around its snapshot's
// encoding as want has it, in a room of the envelope's size or more, and
// refuses a smaller room without touching the buffer.
func wakeAround(t *testing.T, name string, w *topics.Wake, want []byte) {
	t.Helper()
	snap, err := topics.Marshal(&w.AgentTreeSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	env := w.EnvelopeJSONLen()
	if env != len(want)-len(snap)-1 {
		t.Fatalf("%s: EnvelopeJSONLen %d, want %d", name, env, len(want)-len(snap)-1)
	}
	framed := func(room int) []byte {
		b := make([]byte, room, room+len(snap)+1)
		for i := range b {
			b[i] = '#'
		}
		return append(b, snap...)
	}
	for _, room := range []int{env, env + 7} {
		if got, ok := topics.WakeJSONAround(framed(room), room, w); !ok || !bytes.Equal(got, want) {
			t.Fatalf("%s: WakeJSONAround in room %d (envelope %d) gives %v %s", name, room, env, ok, around(got, want))
		}
	}
	short := framed(env - 1)
	before := slices.Clone(short)
	if got, ok := topics.WakeJSONAround(short, env-1, w); ok || got != nil || !bytes.Equal(short, before) {
		t.Fatalf("%s: WakeJSONAround in a room 1 byte short gives %v %q and leaves %q", name, ok, got, short)
	}
	if _, ok := topics.WakeJSONAround(snap[:len(snap):len(snap)], 0, w); ok {
		t.Fatalf("%s: WakeJSONAround with no room after the snapshot says ok", name)
	}
}

func firstByteDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// around shows a's bytes around where it first differs from b.
func around(a, b []byte) string {
	i := firstByteDiff(a, b)
	return string(a[max(i-60, 0):min(i+60, len(a))])
}

// TestAppendJSONMatchesEncodingJSON encodes every snapshot of the golden
// files and every wake the examples produce, and each of their node digests,
// with the fast encoders and with encoding/json, and requires the same bytes.
func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	t.Run("golden", func(t *testing.T) {
		files, err := filepath.Glob("../snapshot/testdata/golden/*.json")
		if err != nil || len(files) < 10 {
			t.Fatalf("golden files: %v, %v", files, err)
		}
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var s topics.AgentTreeSnapshot
			if err := json.Unmarshal(raw, &s); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			// The golden file, compacted, is the builder's exact output.
			var want bytes.Buffer
			if err := json.Compact(&want, raw); err != nil {
				t.Fatal(err)
			}
			if got, err := topics.Marshal(&s); err != nil || !bytes.Equal(got, want.Bytes()) {
				t.Errorf("%s: Marshal gives %s, %v", f, around(got, want.Bytes()), err)
			}
			sameAsEncodingJSON(t, f, &s)
			for i := range s.Nodes {
				sameAsEncodingJSON(t, f, &s.Nodes[i])
			}
			// The builder measures the envelope with an empty node list.
			s.Nodes = []topics.NodeDigest{}
			sameAsEncodingJSON(t, f+" (envelope)", &s)
			s.Nodes = nil
			sameAsEncodingJSON(t, f+" (nil nodes)", &s)
		}
	})
	for _, ex := range exampleReplays {
		t.Run(filepath.Base(ex.file), func(t *testing.T) {
			var wakes, human, nodes int
			replayExample(t, ex, func(w *topics.Wake) {
				wakes++
				name := ex.file + " wake " + w.WakeID
				sameAsEncodingJSON(t, name, w)
				sameAsEncodingJSON(t, name+" snapshot", &w.AgentTreeSnapshot)
				// Every digest of a small wake, and some of the others: the
				// thousand-node example has thousands of wakes of the same
				// few hundred nodes.
				for j := range w.AgentTreeSnapshot.Nodes {
					if ex.allDigests || (wakes+j)%97 == 0 {
						sameAsEncodingJSON(t, name+" node", &w.AgentTreeSnapshot.Nodes[j])
					}
				}
				nodes += len(w.AgentTreeSnapshot.Nodes)
				for _, tr := range w.Triggers {
					if tr.Input != nil {
						human++
					}
				}
			})
			t.Logf("%d wakes, %d digests, %d human inputs", wakes, nodes, human)
			if wakes < ex.minWakes || human < ex.minHuman {
				t.Errorf("%d wakes, %d human inputs: the example no longer covers what it did", wakes, human)
			}
		})
	}
}

// exampleReplay says how to replay an example and what it must give.
type exampleReplay struct {
	file string
	// batch is how many events make a processing batch, as replay's
	// -batch: at most one wake per batch and run.
	batch int
	// allDigests encodes every digest on its own as well; the thousand-node
	// example's wakes repeat the same few hundred nodes, and a sample will do.
	allDigests         bool
	minWakes, minHuman int
}

var exampleReplays = []exampleReplay{
	{file: "../../examples/small-run.jsonl", batch: 1, allDigests: true, minWakes: 6, minHuman: 1},
	{file: "../../examples/thousand-nodes.jsonl", batch: 1, minWakes: 2500},
}

// replayExample replays an example through the projection as
// internal/replay does, handing each wake it builds to fn, then, with every
// run's clock an hour on, the timer wakes (lease expiry, watchdog).
func replayExample(tb testing.TB, ex exampleReplay, fn func(*topics.Wake)) {
	tb.Helper()
	if n, err := replay(ex, fn); err != nil {
		tb.Fatal(err)
	} else if n == 0 {
		tb.Fatal(ex.file + ": no wakes")
	}
}

func replay(ex exampleReplay, fn func(*topics.Wake)) (int, error) {
	f, err := os.Open(ex.file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	p, err := projection.New(projection.Config{})
	if err != nil {
		return 0, err
	}
	wakes := 0
	var pending projection.Pending
	flush := func() error {
		built, err := p.Wakes(&pending, time.Time{}, topics.Time{})
		pending.Reset()
		for _, b := range built {
			wakes++
			fn(b.Wake)
		}
		return err
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	var last topics.Time
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		ev, err := topics.DecodeEvent(line)
		if err != nil {
			return wakes, err
		}
		if ev.Time.After(last) {
			last = ev.Time
		}
		trigs, _ := p.Apply(ev)
		pending.Add(ev.RunID, trigs)
		if n%ex.batch == 0 {
			if err := flush(); err != nil {
				return wakes, err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return wakes, err
	}
	if err := flush(); err != nil {
		return wakes, err
	}
	ids := p.RunIDs()
	slices.Sort(ids)
	for _, id := range ids {
		pending.Add(id, p.Advance(id, last.Add(time.Hour)))
	}
	if err := flush(); err != nil {
		return wakes, err
	}
	return wakes, nil
}

// benchWake is a realistic busy wake: of the thousand-node example's wakes,
// the one whose snapshot comes nearest its 24,000-byte budget, with the
// fewest triggers among those (the wakes of timers falling due at the end
// carry hundreds of triggers).
func benchWake(b *testing.B) *topics.Wake {
	var best *topics.Wake
	var size int
	replayExample(b, exampleReplays[1], func(w *topics.Wake) {
		enc, err := topics.Marshal(&w.AgentTreeSnapshot)
		if err != nil {
			b.Fatal(err)
		}
		if len(enc) > size || len(enc) == size && len(w.Triggers) < len(best.Triggers) {
			best, size = w, len(enc)
		}
	})
	return best
}

// BenchmarkMarshalWake compares encoding a realistic wake with the fast
// encoder (topics.Marshal, and AppendJSON into a reused buffer) against
// encoding/json as Marshal used it before, in the same run.
func BenchmarkMarshalWake(b *testing.B) {
	w := benchWake(b)
	enc, _ := topics.Marshal(w)
	b.Run("encoding_json", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(enc)))
		for b.Loop() {
			if _, err := encodingJSON(w); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Marshal", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(enc)))
		for b.Loop() {
			if _, err := topics.Marshal(w); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("AppendJSON", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(enc)))
		var buf []byte
		for b.Loop() {
			var err error
			if buf, err = w.AppendJSON(buf[:0]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkMarshalDigest compares encoding one node digest, which the
// snapshot builder does for every candidate node of every wake.
func BenchmarkMarshalDigest(b *testing.B) {
	w := benchWake(b)
	nodes := w.AgentTreeSnapshot.Nodes
	b.Run("encoding_json", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := encodingJSON(&nodes[i%len(nodes)]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := topics.Marshal(&nodes[i%len(nodes)]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("AppendJSON", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for i := 0; b.Loop(); i++ {
			var err error
			if buf, err = nodes[i%len(nodes)].AppendJSON(buf[:0]); err != nil {
				b.Fatal(err)
			}
		}
	})
}
