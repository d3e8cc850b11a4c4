package projection

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/pkg/snapshot"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// FuzzApply feeds event sequences made from arbitrary bytes to the
// projection: every 8 bytes make one event (its type, agent, parent,
// correlation id, time step — forwards, backwards or tied — and payload
// values), and lines that start with '{' are decoded as raw events. After
// each batch it checks the indexes against a scan, every wake against the
// snapshot bounds, and the split of the triggers over wakes of at most
// three (checkParts).
func FuzzApply(f *testing.F) {
	f.Add([]byte("\x00\x01\x02\x03\x04\x05\x06\x07\x10\x11\x12\x13\x14\x15\x16\x17"))
	f.Add(bytes.Repeat([]byte("\x05\x02\x01\x00\x03\x09\xff\x80"), 40))
	f.Add([]byte(`{"specversion":"1.0","id":"a","source":"s","type":"signal.failed","time":"2026-02-14T10:00:00Z","runid":"r","agentid":"x","schemaversion":1,"data":{"error_code":"e"}}` + "\n\x01\x02\x03\x04\x05\x06\x07\x08"))
	f.Fuzz(func(t *testing.T, data []byte) {
		limits := snapshot.Limits{MaxNodes: 8, MaxBytes: 4096, MaxCorrelationHandles: 3, MaxStringLength: 16}
		p, err := New(Config{MaxDepth: 2, ProgressInterval: 3 * time.Second, ForwardGrace: 5 * time.Second,
			Limits: limits, MaxWakeTriggers: 3, MaxWakeBytes: limits.MaxBytes + wakeOverhead()})
		if err != nil {
			t.Fatal(err)
		}
		base := time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC)
		clock := base
		var pending Pending
		seq := 0
		check := func() {
			want := map[string][]topics.Trigger{}
			for _, run := range pending.order {
				want[run] = append([]topics.Trigger(nil), pending.trigs[run]...)
			}
			built, err := p.Wakes(&pending, time.Time{}, topics.Time{})
			pending.Reset()
			if err != nil {
				t.Fatal(err)
			}
			checkParts(t, p.cfg, built, want, map[string]bool{})
			for _, b := range built {
				checkWake(t, b, p.cfg.Limits)
			}
			for _, id := range p.RunIDs() {
				r, _ := p.Run(id)
				if err := checkInvariants(r); err != nil {
					t.Fatal(err)
				}
				// The read model builds, and the run's activity record
				// fits and reads back as it was.
				if _, err := p.ReadModel(id, clock, false); err != nil {
					t.Fatal(err)
				}
				if r.act != nil {
					enc, err := encodeActivity(r.act)
					if err != nil {
						t.Fatal(err)
					}
					back, err := decodeActivity(enc)
					if err != nil {
						t.Fatal(err)
					}
					if again, _ := encodeActivity(back); !bytes.Equal(enc, again) {
						t.Fatalf("activity record changed by a round trip:\n%s\n%s", enc, again)
					}
				}
			}
		}
		for len(data) > 0 {
			if data[0] == '{' {
				line, rest, _ := bytes.Cut(data, []byte("\n"))
				data = rest
				if ev, err := topics.DecodeEvent(line); err == nil {
					pending.Add(ev.RunID, first(p.Apply(ev)))
				}
				continue
			}
			var b [8]byte
			data = data[copy(b[:], data):]
			seq++
			// Time: mostly forwards, sometimes tied or backwards.
			clock = clock.Add(time.Duration(int8(b[5])) * 250 * time.Millisecond)
			if clock.Before(base) {
				clock = base
			}
			ev := fuzzEvent(b, seq, clock)
			if err := ev.Validate(); err != nil {
				continue // the generator made something the contract refuses
			}
			pending.Add(ev.RunID, first(p.Apply(ev)))
			if b[7]%4 == 0 {
				check()
			}
			if b[7] == 0xff {
				for _, id := range p.RunIDs() {
					pending.Add(id, p.Advance(id, topics.NewTime(clock.Add(time.Minute))))
				}
			}
		}
		check()
	})
}

func first(trigs []topics.Trigger, _ bool) []topics.Trigger { return trigs }

var fuzzAgents = []string{"root", "a", "b", "c", "d", "é\u2028\"", "f"}

// fuzzEvent makes one event from 8 bytes.
func fuzzEvent(b [8]byte, seq int, at time.Time) *topics.Event {
	types := topics.EventTypes()
	typ := types[int(b[0])%len(types)]
	agent := fuzzAgents[int(b[1])%len(fuzzAgents)]
	other := fuzzAgents[int(b[2])%len(fuzzAgents)]
	corr := ""
	if b[3]%3 != 0 {
		corr = fmt.Sprintf("c%d", b[3]%4)
	}
	future := topics.NewTime(at.Add(time.Duration(b[4]%16) * time.Second))
	p := topics.NewPayload(typ)
	switch d := p.(type) {
	case *topics.NodeCreated:
		d.Role = topics.Roles[int(b[4])%len(topics.Roles)]
		if agent != "root" {
			d.ParentAgentID = other
		}
	case *topics.NodeDelegated:
		if b[4]%2 == 0 {
			d.ExpectedBy = &future
		}
	case *topics.NodeStatus:
		d.Status = topics.ReportableStatuses[int(b[4])%len(topics.ReportableStatuses)]
		if b[6]%5 == 0 {
			d.Reason = "guard:maxBands"
		}
	case *topics.Lease:
		d.Owner, d.ExpiresAt = other, future
	case *topics.Request:
		d.RequestID = fmt.Sprintf("q%d", b[6]%6)
		d.RequestKind = "ask"
		d.DedupeKey = fmt.Sprintf("k%d", b[4]%5)
		d.TTLMs = int64(b[6]%3) * 2000
	case *topics.RequestResolved:
		d.RequestID = fmt.Sprintf("q%d", b[6]%6)
	case *topics.Failed:
		d.ErrorCode = "e"
	case *topics.Input:
		d.InputKind = "message"
	case *topics.WakeReceived:
		d.WakeID, d.AgentIDs = "w", []string{agent, other}
	case *topics.PlanCreated:
		d.PlanID = "p"
	case *topics.PlanBandCreated:
		d.PlanID, d.BandIndex = "p", int(b[4]%70)
	case *topics.StepCreated:
		d.PlanID, d.StepID, d.BandIndex = "p", "s", int(b[4]%70)
	case *topics.ArtifactCreated:
		d.ArtifactID, d.ArtifactType = "x", "json"
	case *topics.ParentHint:
		d.HintType = "read_json"
	case *topics.ScratchpadUpdated:
		d.ScratchpadID = "sp"
	default:
		fuzzActivity(p, b)
	}
	id := fmt.Sprintf("e%d", seq)
	if b[6]%11 == 0 && seq > 1 {
		id = fmt.Sprintf("e%d", seq-1) // a duplicate id
	}
	return &topics.Event{ID: id, Source: "/fuzz", Type: typ, Time: topics.NewTime(at), RunID: fmt.Sprintf("run-%d", b[7]%2),
		AgentID: agent, SchemaVersion: 1, CorrelationID: corr, Data: p}
}

// fuzzActivity fills an activity payload from b: few ids, so that starts
// and ends, opens and resolutions meet.
func fuzzActivity(p topics.Payload, b [8]byte) {
	id := fmt.Sprintf("x%d", b[6]%5)
	pick := func(vs []string) string { return vs[int(b[4])%len(vs)] }
	code := int64(b[4] % 3)
	switch d := p.(type) {
	case *topics.TurnQueued:
		d.TurnID = id
	case *topics.TurnStarted:
		d.TurnID = id
	case *topics.TurnCompleted:
		d.TurnID, d.Outcome, d.Summary = id, pick(topics.TurnOutcomes), "done é\n"
	case *topics.ToolStarted:
		d.CallID, d.ToolName, d.CallKind, d.Command = id, fmt.Sprintf("t%d", b[4]%3), pick(topics.CallKinds), "ls -la"
	case *topics.ToolFinished:
		d.CallID, d.Outcome, d.ExitCode = id, pick(topics.CallOutcomes), &code
	case *topics.EvidenceRecorded:
		d.EvidenceID, d.EvidenceKind, d.Verdict, d.ArtifactID = id, "test_run", pick(topics.EvidenceVerdicts), "x"
	case *topics.IncidentOpened:
		d.IncidentID, d.IncidentKind, d.Severity = id, "k", pick(topics.Severities)
	case *topics.IncidentResolved:
		d.IncidentID = id
	case *topics.ProcessStarted:
		d.ProcessID, d.Environment = id, pick(topics.Environments)
	case *topics.ProcessExited:
		d.ProcessID, d.ExitCode = id, &code
	case *topics.ModelUsage:
		d.Model, d.InputTokens, d.CostMicros = fmt.Sprintf("m%d", b[4]%3), int64(b[6])<<40, 1<<62
	case *topics.LimitUpdated:
		d.LimitKind, d.State = fmt.Sprintf("l%d", b[6]%3), pick(topics.LimitStates)
	case *topics.RuntimeConfigured:
		d.PermissionMode, d.SandboxProfile = pick(topics.PermissionModes), "sb"
	case *topics.ContextCompacted:
		d.BoundaryID = id
	case *topics.ChannelState:
		d.ChannelID, d.ChannelKind, d.State = id, "web", pick(topics.ChannelStates)
	case *topics.SessionUpdated:
		d.Title, d.PinnedThreadIDs = "t", []string{id}
	}
}

// checkWake asserts a wake's snapshot keeps seed 000's bounds.
func checkWake(t *testing.T, b Built, l snapshot.Limits) {
	t.Helper()
	enc, err := topics.Marshal(b.Wake)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := topics.DecodeWake(enc); err != nil {
		t.Fatalf("wake does not decode: %v", err)
	}
	s := &b.Wake.AgentTreeSnapshot
	senc, _ := topics.Marshal(s)
	l = l.WithDefaults()
	if len(senc) > l.MaxBytes {
		t.Fatalf("snapshot is %d bytes, over %d", len(senc), l.MaxBytes)
	}
	if len(s.Nodes) > l.MaxNodes {
		t.Fatalf("%d nodes, over %d", len(s.Nodes), l.MaxNodes)
	}
	if s.RootAgentID != nil && (len(s.Nodes) == 0 || s.Nodes[0].AgentID != *s.RootAgentID) {
		t.Fatalf("root %q is not first", *s.RootAgentID)
	}
	if !json.Valid(senc) {
		t.Fatal("invalid JSON")
	}
}
