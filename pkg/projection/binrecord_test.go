package projection

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestNodeRecordEncodings: a node record comes back from the binary
// encoding exactly as from the earlier JSON one (whose omitempty turns an
// empty list into none), for records with every field set or not; a
// truncated record and one of an unknown version are errors that say so.
func TestNodeRecordEncodings(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 17))
	str := func() string {
		if rng.IntN(3) == 0 {
			return ""
		}
		return fmt.Sprintf("s-%d-\u00e9\x00\"", rng.IntN(1000))
	}
	num := func() int64 { return rng.Int64N(1<<42) - 1<<41 }
	strs := func() []string {
		n := rng.IntN(4)
		if n == 0 && rng.IntN(2) == 0 {
			return nil
		}
		out := make([]string, n)
		for i := range out {
			out[i] = str()
		}
		return out
	}
	for i := range 2000 {
		r := nodeRecord{AgentID: str(), Role: str(), Parent: str(), Status: str(), StatusAt: num(), StatusReason: str(),
			LeaseOwner: str(), LeaseExpires: num(), Overdue: rng.IntN(2) == 0, ActiveRunID: str(), ActiveTaskID: str(),
			Capability: str(), SignalKind: str(), SignalAt: num(), Correlation: str(), LastRequestKind: str(),
			RecentDedupeKeys: strs(), Requests: strs(), Created: rng.IntN(2) == 0, Depth: int(num() % 100)}
		if rng.IntN(2) == 0 {
			r.Watchdog = &wdRecord{DispatchAt: num(), ExpectedBy: num(), ChildRunID: str(), ChildSessionKey: str(),
				CompletionAt: num(), Forwarded: rng.IntN(2) == 0, ResultSource: str(), Status: str(), StatusAt: num(),
				StatusReason: str(), WasSuspect: rng.IntN(2) == 0, HasResult: rng.IntN(2) == 0, GraceDue: num()}
		}
		js, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		want, err := decodeNode(js)
		if err != nil {
			t.Fatalf("record %d: the JSON encoding does not decode: %v", i, err)
		}
		bin := encodeNode(nil, &r)
		got, err := decodeNode(bin)
		if err != nil {
			t.Fatalf("record %d: the binary encoding does not decode: %v", i, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("record %d differs by encoding:\nbinary: %+v\nJSON:   %+v", i, got, want)
		}
		if cut := bin[:rng.IntN(len(bin))]; len(cut) > 0 {
			if _, err := decodeNode(cut); err == nil {
				t.Fatalf("record %d cut to %d of %d bytes decodes", i, len(cut), len(bin))
			}
		}
	}
	bad := encodeNode(nil, &nodeRecord{AgentID: "a"})
	bad[0] = 7
	if _, err := decodeNode(bad); !errors.Is(err, errRecordVersion) || !strings.Contains(err.Error(), "version 7") {
		t.Fatalf("a node record of version 7: %v; want an error naming the version", err)
	}
}

// TestMetaRecordEncodings: a run meta record reads back the same from its
// binary encoding as from the JSON earlier builds wrote; a cut record or
// an unknown version fails, naming it.
func TestMetaRecordEncodings(t *testing.T) {
	rng := rand.New(rand.NewPCG(18, 18))
	str := func() string {
		if rng.IntN(3) == 0 {
			return ""
		}
		return fmt.Sprintf("s-%d-\u00e9\x00\"", rng.IntN(1000))
	}
	num := func() int64 { return rng.Int64N(1<<42) - 1<<41 }
	// A diagnostic always has a time (JSON could not carry a zero one).
	when := func() topics.Time { return topics.UnixMilliTime(1 + rng.Int64N(1<<42)) }
	for i := range 2000 {
		m := metaRecord{Seq: num(), Clock: num(), SessionID: str(), ThreadID: str(), Root: str(), LastProgressWake: num(), First: num()}
		for range rng.IntN(4) {
			m.PlanOrder = append(m.PlanOrder, str())
		}
		for range rng.IntN(4) {
			m.Diagnostics = append(m.Diagnostics, Diagnostic{Kind: str(), AgentID: str(), At: when(), Detail: str()})
		}
		js, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		want, err := decodeMeta(js)
		if err != nil {
			t.Fatalf("record %d: the JSON encoding does not decode: %v", i, err)
		}
		bin := encodeMeta(nil, &m)
		got, err := decodeMeta(bin)
		if err != nil {
			t.Fatalf("record %d: the binary encoding does not decode: %v", i, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("record %d differs by encoding:\nbinary: %+v\nJSON:   %+v", i, got, want)
		}
		if cut := bin[:rng.IntN(len(bin))]; len(cut) > 0 {
			if _, err := decodeMeta(cut); err == nil {
				t.Fatalf("record %d cut to %d of %d bytes decodes", i, len(cut), len(bin))
			}
		}
	}
	// Version 1, without First (a trailing 0 varint here), reads with
	// First unknown.
	old := metaRecord{Seq: 7, Clock: 7000, SessionID: "s", Root: "root", Diagnostics: []Diagnostic{{Kind: "k", AgentID: "a", At: when()}}}
	v1 := encodeMeta(nil, &old)
	v1 = v1[:len(v1)-1]
	v1[0] = metaBinaryVersionV1
	if got, err := decodeMeta(v1); err != nil || !reflect.DeepEqual(*got, old) {
		t.Fatalf("a version 1 meta record: %+v, %v; want %+v", got, err, old)
	}
	bad := encodeMeta(nil, &metaRecord{Seq: 1})
	bad[0] = 9
	if _, err := decodeMeta(bad); !errors.Is(err, errRecordVersion) || !strings.Contains(err.Error(), "version 9") {
		t.Fatalf("a meta record of version 9: %v; want an error naming the version", err)
	}
}

// TestPlanRecordEncodings: a plan's header and its step records read back
// from their binary encodings as the plan was, and as the earlier JSON
// record (header and steps in one) gives it; a cut record or an unknown
// version fails, naming it; a step record's key names its plan, band and
// which of the band's steps it holds.
func TestPlanRecordEncodings(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 19))
	str := func() string {
		if rng.IntN(3) == 0 {
			return ""
		}
		return fmt.Sprintf("s-%d-\u00e9\"", rng.IntN(1000))
	}
	for i := range 500 {
		pl := &Plan{PlanID: "p-\u00e9", AgentID: str(), BandCount: rng.IntN(100), Replan: rng.IntN(2) == 0,
			CreatedAt: topics.UnixMilliTime(1 + rng.Int64N(1<<42)), Bands: map[int]*Band{}}
		for range rng.IntN(5) {
			b := &Band{Index: rng.IntN(maxBandsPerPlan), Parallelizable: rng.IntN(2) == 0, StepCount: rng.IntN(300)}
			for j := range rng.IntN(3) * rng.IntN(100) {
				b.Steps = append(b.Steps, Step{StepID: str(), Index: j, ChildAgentID: str()})
			}
			pl.Bands[b.Index] = b
		}
		// The binary header and the step records.
		got, legacy, err := decodePlan(pl.PlanID, encodePlan(nil, pl))
		if err != nil || legacy {
			t.Fatalf("plan %d: the header does not decode: %v (legacy %v)", i, err, legacy)
		}
		for bi, b := range pl.Bands {
			for c := 0; c*stepsPerRecord < len(b.Steps); c++ {
				want := stepRef{pl.PlanID, bi, c}
				ref, ok := parseStepKey(string(stepKey("run", want)[len("run")+3:]))
				if !ok || ref != want {
					t.Fatalf("plan %d: step key %+v parses to %+v, %v", i, want, ref, ok)
				}
				enc := encodeSteps(nil, b.stepsOf(ref))
				steps, err := decodeSteps(enc)
				if err != nil {
					t.Fatalf("plan %d: a step record does not decode: %v", i, err)
				}
				if _, err := decodeSteps(enc[:rng.IntN(len(enc))]); err == nil {
					t.Fatalf("plan %d: a cut step record decodes", i)
				}
				got.Bands[bi].Steps = append(got.Bands[bi].Steps, steps...)
			}
		}
		if !reflect.DeepEqual(got, pl) {
			t.Fatalf("plan %d read back:\n%+v\nwant\n%+v", i, got, pl)
		}
		// The earlier JSON record, steps included.
		pr := planRecord{AgentID: pl.AgentID, BandCount: pl.BandCount, Replan: pl.Replan, CreatedAt: ms(pl.CreatedAt)}
		for j := range maxBandsPerPlan {
			if b, ok := pl.Bands[j]; ok {
				pr.Bands = append(pr.Bands, *b)
			}
		}
		js, _ := json.Marshal(pr)
		old, legacy, err := decodePlan(pl.PlanID, js)
		if err != nil || !legacy || !reflect.DeepEqual(old, pl) {
			t.Fatalf("plan %d from JSON: %+v, legacy %v, %v; want %+v", i, old, legacy, err, pl)
		}
		bin := encodePlan(nil, pl)
		if cut := bin[:1+rng.IntN(len(bin)-1)]; len(cut) < len(bin) {
			if _, _, err := decodePlan(pl.PlanID, cut); err == nil {
				t.Fatalf("plan %d cut to %d of %d bytes decodes", i, len(cut), len(bin))
			}
		}
	}
	bad := encodePlan(nil, &Plan{Bands: map[int]*Band{}})
	bad[0] = 8
	if _, _, err := decodePlan("p", bad); !errors.Is(err, errRecordVersion) || !strings.Contains(err.Error(), "version 8") {
		t.Fatalf("a plan record of version 8: %v; want an error naming the version", err)
	}
	badStep := encodeSteps(nil, []Step{{StepID: "s"}})
	badStep[0] = 8
	if _, err := decodeSteps(badStep); !errors.Is(err, errRecordVersion) || !strings.Contains(err.Error(), "version 8") {
		t.Fatalf("a step record of version 8: %v; want an error naming the version", err)
	}
}
