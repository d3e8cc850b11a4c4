package projection

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// Node records are stored in a compact binary encoding: JSON encoding of
// nodes would be most of a commit's state encoding. The first byte says
// which: '{' is the legacy JSON encoding (read, so that a store or a
// changelog written by an older build loads), nodeBinaryVersion this one. Fields, in
// nodeRecord's order: strings as a uvarint length and bytes, integers as
// zigzag varints, booleans as one byte, string lists as a count and
// strings, and the watchdog as a presence byte and its fields.
const nodeBinaryVersion = 1

// errRecordVersion is wrapped when a record has an encoding this build does
// not read (a newer canopy wrote it).
var errRecordVersion = errors.New("state record of an unknown encoding version")

type recWriter struct{ b []byte }

func (w *recWriter) str(s string) {
	w.b = binary.AppendUvarint(w.b, uint64(len(s)))
	w.b = append(w.b, s...)
}
func (w *recWriter) int(v int64) { w.b = binary.AppendVarint(w.b, v) }
func (w *recWriter) bool(v bool) {
	if v {
		w.b = append(w.b, 1)
	} else {
		w.b = append(w.b, 0)
	}
}
func (w *recWriter) strs(ss []string) {
	w.b = binary.AppendUvarint(w.b, uint64(len(ss)))
	for _, s := range ss {
		w.str(s)
	}
}

// recReader reads what recWriter wrote; the first problem sticks in err.
type recReader struct {
	b   []byte
	err error
}

func (r *recReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("truncated or corrupt %s", what)
	}
}
func (r *recReader) str(what string) string {
	if r.err != nil {
		return ""
	}
	l, k := binary.Uvarint(r.b)
	if k <= 0 || l > uint64(len(r.b)-k) {
		r.fail(what)
		return ""
	}
	s := string(r.b[k : k+int(l)])
	r.b = r.b[k+int(l):]
	return s
}
func (r *recReader) int(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, k := binary.Varint(r.b)
	if k <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[k:]
	return v
}
func (r *recReader) bool(what string) bool {
	if r.err != nil {
		return false
	}
	if len(r.b) == 0 || r.b[0] > 1 {
		r.fail(what)
		return false
	}
	v := r.b[0] == 1
	r.b = r.b[1:]
	return v
}
func (r *recReader) strs(what string) []string {
	if r.err != nil {
		return nil
	}
	n, k := binary.Uvarint(r.b)
	if k <= 0 || n > uint64(len(r.b)) {
		r.fail(what)
		return nil
	}
	r.b = r.b[k:]
	if n == 0 {
		return nil // as the JSON's omitempty gave
	}
	out := make([]string, n)
	for i := range out {
		out[i] = r.str(what)
	}
	return out
}

// recordBody tells a stored record's encoding by its first byte: the
// earlier JSON ('{', still read), or version; anything else fails naming
// the version. what names the record in errors.
func recordBody(v []byte, what string, version byte) (isJSON bool, body []byte, err error) {
	switch {
	case len(v) == 0:
		return false, nil, fmt.Errorf("empty %s", what)
	case v[0] == '{':
		return true, v, nil
	case v[0] != version:
		return false, nil, fmt.Errorf("%w: %s version %d, this build reads %d and JSON (was the state written by a newer canopy?)",
			errRecordVersion, what, v[0], version)
	}
	return false, v[1:], nil
}

// done is the reader's verdict once a record is read: its first problem,
// or bytes left over.
func (r *recReader) done(what string) error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d trailing bytes", len(r.b))
	}
	if r.err != nil {
		return fmt.Errorf("%s: %w", what, r.err)
	}
	return nil
}

// encodeNode appends r's binary encoding to dst.
func encodeNode(dst []byte, r *nodeRecord) []byte {
	// Sized at once: growing it field by field cost more allocations than
	// the JSON encoder made.
	size := 96 + len(r.AgentID) + len(r.Role) + len(r.Parent) + len(r.Status) + len(r.StatusReason) + len(r.LeaseOwner) +
		len(r.ActiveRunID) + len(r.ActiveTaskID) + len(r.Capability) + len(r.SignalKind) + len(r.Correlation) + len(r.LastRequestKind)
	for _, ss := range [][]string{r.RecentDedupeKeys, r.Requests} {
		for _, s := range ss {
			size += 2 + len(s)
		}
	}
	if wd := r.Watchdog; wd != nil {
		size += 96 + len(wd.ChildRunID) + len(wd.ChildSessionKey) + len(wd.ResultSource) + len(wd.Status) + len(wd.StatusReason)
	}
	w := recWriter{b: append(slices.Grow(dst, size), nodeBinaryVersion)}
	w.str(r.AgentID)
	w.str(r.Role)
	w.str(r.Parent)
	w.str(r.Status)
	w.int(r.StatusAt)
	w.str(r.StatusReason)
	w.str(r.LeaseOwner)
	w.int(r.LeaseExpires)
	w.bool(r.Overdue)
	w.str(r.ActiveRunID)
	w.str(r.ActiveTaskID)
	w.str(r.Capability)
	w.str(r.SignalKind)
	w.int(r.SignalAt)
	w.str(r.Correlation)
	w.str(r.LastRequestKind)
	w.strs(r.RecentDedupeKeys)
	w.strs(r.Requests)
	w.bool(r.Created)
	w.int(int64(r.Depth))
	w.bool(r.Watchdog != nil)
	if wd := r.Watchdog; wd != nil {
		w.int(wd.DispatchAt)
		w.int(wd.ExpectedBy)
		w.str(wd.ChildRunID)
		w.str(wd.ChildSessionKey)
		w.int(wd.CompletionAt)
		w.bool(wd.Forwarded)
		w.str(wd.ResultSource)
		w.str(wd.Status)
		w.int(wd.StatusAt)
		w.str(wd.StatusReason)
		w.bool(wd.WasSuspect)
		w.bool(wd.HasResult)
		w.int(wd.GraceDue)
	}
	return w.b
}

// decodeNode reads a node record in either encoding.
func decodeNode(v []byte) (nodeRecord, error) {
	var r nodeRecord
	isJSON, body, err := recordBody(v, "node record", nodeBinaryVersion)
	if err != nil || isJSON {
		if err == nil {
			err = json.Unmarshal(body, &r)
		}
		return r, err
	}
	rd := recReader{b: body}
	r.AgentID = rd.str("agent id")
	r.Role = rd.str("role")
	r.Parent = rd.str("parent")
	r.Status = rd.str("status")
	r.StatusAt = rd.int("status time")
	r.StatusReason = rd.str("status reason")
	r.LeaseOwner = rd.str("lease owner")
	r.LeaseExpires = rd.int("lease expiry")
	r.Overdue = rd.bool("overdue")
	r.ActiveRunID = rd.str("run id")
	r.ActiveTaskID = rd.str("task id")
	r.Capability = rd.str("capability")
	r.SignalKind = rd.str("signal kind")
	r.SignalAt = rd.int("signal time")
	r.Correlation = rd.str("correlation id")
	r.LastRequestKind = rd.str("request kind")
	r.RecentDedupeKeys = rd.strs("dedupe keys")
	r.Requests = rd.strs("requests")
	r.Created = rd.bool("created")
	r.Depth = int(rd.int("depth"))
	if rd.bool("watchdog") {
		r.Watchdog = &wdRecord{
			DispatchAt: rd.int("dispatch time"), ExpectedBy: rd.int("expected by"), ChildRunID: rd.str("child run"),
			ChildSessionKey: rd.str("child session"), CompletionAt: rd.int("completion time"), Forwarded: rd.bool("forwarded"),
			ResultSource: rd.str("result source"), Status: rd.str("watchdog status"), StatusAt: rd.int("watchdog status time"),
			StatusReason: rd.str("watchdog reason"), WasSuspect: rd.bool("suspect"), HasResult: rd.bool("result"),
			GraceDue: rd.int("grace due"),
		}
	}
	return r, rd.done("node record")
}

// Run meta records are binary too (a commit writes one for every dirty
// run), versioned like node records: '{' is the legacy JSON encoding, read;
// metaBinaryVersion this one. Fields in metaRecord's order but First, then
// each diagnostic as kind, agent, time (Unix ms, 0 for none) and detail,
// then First. Version 1 (metaBinaryVersionV1) had no First, and is read
// with First 0 (unknown).
const (
	metaBinaryVersion   = 2
	metaBinaryVersionV1 = 1
)

// encodeMeta appends m's binary encoding to dst.
func encodeMeta(dst []byte, m *metaRecord) []byte {
	size := 48 + len(m.SessionID) + len(m.ThreadID) + len(m.Root)
	for _, p := range m.PlanOrder {
		size += 2 + len(p)
	}
	for _, d := range m.Diagnostics {
		size += 16 + len(d.Kind) + len(d.AgentID) + len(d.Detail)
	}
	w := recWriter{b: append(slices.Grow(dst, size), metaBinaryVersion)}
	w.int(m.Seq)
	w.int(m.Clock)
	w.str(m.SessionID)
	w.str(m.ThreadID)
	w.str(m.Root)
	w.int(m.LastProgressWake)
	w.strs(m.PlanOrder)
	w.b = binary.AppendUvarint(w.b, uint64(len(m.Diagnostics)))
	for _, d := range m.Diagnostics {
		w.str(d.Kind)
		w.str(d.AgentID)
		w.int(ms(d.At))
		w.str(d.Detail)
	}
	w.int(m.First)
	return w.b
}

// decodeMeta reads a run meta record in either encoding.
func decodeMeta(v []byte) (*metaRecord, error) {
	m := new(metaRecord)
	version := byte(metaBinaryVersion)
	if len(v) > 0 && v[0] == metaBinaryVersionV1 {
		version = metaBinaryVersionV1
	}
	isJSON, body, err := recordBody(v, "run meta record", version)
	if err != nil {
		return nil, err
	}
	if isJSON {
		if err := json.Unmarshal(body, m); err != nil {
			return nil, err
		}
		return m, nil
	}
	rd := recReader{b: body}
	m.Seq = rd.int("seq")
	m.Clock = rd.int("clock")
	m.SessionID = rd.str("session id")
	m.ThreadID = rd.str("thread id")
	m.Root = rd.str("root")
	m.LastProgressWake = rd.int("progress wake")
	m.PlanOrder = rd.strs("plan order")
	n, k := binary.Uvarint(rd.b)
	if rd.err == nil && (k <= 0 || n > uint64(len(rd.b))) {
		rd.fail("diagnostics")
	}
	if rd.err == nil {
		rd.b = rd.b[k:]
		if n > 0 {
			m.Diagnostics = make([]Diagnostic, n)
		}
		for i := range m.Diagnostics {
			d := &m.Diagnostics[i]
			d.Kind = rd.str("diagnostic kind")
			d.AgentID = rd.str("diagnostic agent")
			d.At = fromMs(rd.int("diagnostic time"))
			d.Detail = rd.str("diagnostic detail")
		}
	}
	if version != metaBinaryVersionV1 {
		m.First = rd.int("first event time")
	}
	if err := rd.done("run meta record"); err != nil {
		return nil, err
	}
	return m, nil
}

// A plan is stored as a header record, 'r' run 0x00 'p' plan, and its
// steps in records of stepsPerRecord, 'r' run 0x00 's' plan 0x00 band chunk
// (a byte each: the band's index, and which stepsPerRecord of its steps),
// so that no record grows with the plan (up to maxBandsPerPlan bands of
// maxStepsPerBand steps with ids of any length: MaxRecordBytes) and a
// commit rewrites only the step records its events added to. Both are
// binary and versioned like node records; a header whose first byte is '{'
// is the earlier JSON, which held the steps too (planRecord), and is still
// read. Header fields: agent id, band count, replan, created at (Unix ms),
// then the bands in index order, each its index, parallelizable and step
// count. A step record: the count, then each step's id, index and child
// agent id.
const (
	planBinaryVersion = 1
	stepBinaryVersion = 1
)

// stepsPerRecord is how many steps of a band one step record holds: with
// ids at their longest, 64 steps take about 130 KiB.
const stepsPerRecord = 64

// stepRef names a step record: the chunk-th stepsPerRecord steps of a band
// of a plan.
type stepRef struct {
	plan        string
	band, chunk int
}

func stepKey(run string, s stepRef) []byte {
	return runKey(run, 's', s.plan+string([]byte{0, byte(s.band), byte(s.chunk)}))
}

// parseStepKey is stepKey's inverse on the key's part after 's'.
func parseStepKey(rest string) (stepRef, bool) {
	n := len(rest)
	if n < 4 || rest[n-3] != 0 {
		return stepRef{}, false
	}
	return stepRef{plan: rest[:n-3], band: int(rest[n-2]), chunk: int(rest[n-1])}, true
}

// stepsOf returns the steps of b that ref's record holds.
func (b *Band) stepsOf(ref stepRef) []Step {
	lo := ref.chunk * stepsPerRecord
	if lo >= len(b.Steps) {
		return nil
	}
	return b.Steps[lo:min(lo+stepsPerRecord, len(b.Steps))]
}

// encodePlan appends the binary encoding of pl's header (its bands without
// their steps) to dst.
func encodePlan(dst []byte, pl *Plan) []byte {
	w := recWriter{b: append(slices.Grow(dst, 32+len(pl.AgentID)+8*len(pl.Bands)), planBinaryVersion)}
	w.str(pl.AgentID)
	w.int(int64(pl.BandCount))
	w.bool(pl.Replan)
	w.int(ms(pl.CreatedAt))
	n := 0
	for i := range maxBandsPerPlan {
		if _, ok := pl.Bands[i]; ok {
			n++
		}
	}
	w.b = binary.AppendUvarint(w.b, uint64(n))
	for i := range maxBandsPerPlan {
		if b, ok := pl.Bands[i]; ok {
			w.int(int64(b.Index))
			w.bool(b.Parallelizable)
			w.int(int64(b.StepCount))
		}
	}
	return w.b
}

// decodePlan reads a plan header record of plan id in either encoding:
// from the earlier JSON, the plan's steps too (legacy true).
func decodePlan(id string, v []byte) (pl *Plan, legacy bool, err error) {
	isJSON, body, err := recordBody(v, "plan record", planBinaryVersion)
	if err != nil {
		return nil, false, err
	}
	if isJSON {
		var pr planRecord
		if err := json.Unmarshal(body, &pr); err != nil {
			return nil, false, err
		}
		pl = &Plan{PlanID: id, AgentID: pr.AgentID, BandCount: pr.BandCount, Replan: pr.Replan,
			CreatedAt: fromMs(pr.CreatedAt), Bands: make(map[int]*Band)}
		for i := range pr.Bands {
			b := pr.Bands[i]
			pl.Bands[b.Index] = &b
		}
		return pl, true, nil
	}
	rd := recReader{b: body}
	pl = &Plan{PlanID: id, AgentID: rd.str("agent id"), BandCount: int(rd.int("band count")), Replan: rd.bool("replan"),
		CreatedAt: fromMs(rd.int("created at")), Bands: make(map[int]*Band)}
	n, k := binary.Uvarint(rd.b)
	if rd.err == nil && (k <= 0 || n > maxBandsPerPlan) {
		rd.fail("band count")
	}
	if rd.err == nil {
		rd.b = rd.b[k:]
		for range n {
			b := &Band{Index: int(rd.int("band index")), Parallelizable: rd.bool("parallelizable"), StepCount: int(rd.int("step count"))}
			if rd.err == nil && (b.Index < 0 || b.Index >= maxBandsPerPlan) {
				rd.fail("band index")
			}
			pl.Bands[b.Index] = b
		}
	}
	return pl, false, rd.done("plan record")
}

// encodeSteps appends the binary encoding of a step record holding steps
// to dst.
func encodeSteps(dst []byte, steps []Step) []byte {
	size := 16
	for i := range steps {
		size += 24 + len(steps[i].StepID) + len(steps[i].ChildAgentID)
	}
	w := recWriter{b: append(slices.Grow(dst, size), stepBinaryVersion)}
	w.b = binary.AppendUvarint(w.b, uint64(len(steps)))
	for i := range steps {
		w.str(steps[i].StepID)
		w.int(int64(steps[i].Index))
		w.str(steps[i].ChildAgentID)
	}
	return w.b
}

// decodeSteps reads a step record.
func decodeSteps(v []byte) ([]Step, error) {
	if len(v) == 0 {
		return nil, fmt.Errorf("empty step record")
	}
	if v[0] != stepBinaryVersion {
		return nil, fmt.Errorf("%w: step record version %d, this build reads %d (was the state written by a newer canopy?)",
			errRecordVersion, v[0], stepBinaryVersion)
	}
	rd := recReader{b: v[1:]}
	n, k := binary.Uvarint(rd.b)
	if k <= 0 || n > stepsPerRecord {
		return nil, fmt.Errorf("step record: truncated or corrupt count")
	}
	rd.b = rd.b[k:]
	out := make([]Step, n)
	for i := range out {
		out[i] = Step{StepID: rd.str("step id"), Index: int(rd.int("step index")), ChildAgentID: rd.str("child agent id")}
	}
	return out, rd.done("step record")
}
