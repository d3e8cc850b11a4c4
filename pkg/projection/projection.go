package projection

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/btree"

	"github.com/oklog/ulid/v2"

	"github.com/canopy-dev/canopy/pkg/ids"
	"github.com/canopy-dev/canopy/pkg/snapshot"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// Projection holds the runs of one partition (or, in replay, of a whole
// file). It is not safe for concurrent use: one goroutine owns it.
//
// With a Storage (Open), runs live in it and the hottest stay in memory (up to
// Config.MaxHotNodes nodes); Commit writes everything that changed since the
// last commit together with the consumed offsets in one atomic batch. A
// storage failure is sticky: Apply and Advance do nothing more once one has
// happened, and Commit and Err return it.
type Projection struct {
	cfg  Config
	runs map[string]*Run

	store *store
	err   error
	// dues holds (next timer due, run) of every run with a timer, in memory
	// or not, so that timers fire for runs that are not loaded.
	dues     *btree.BTreeG[timed]
	due      map[string]int64
	dueDirty map[string]struct{}
	hotNodes int
	// large are the runs that had more than Config.MaxHotNodesPerRun
	// nodes in memory at their last account, to trim after the next
	// commit (budget.go).
	large map[string]*Run
	// shedding: shedDigests stopped runs caching their digests, until the
	// projection is well under its budget again (cacheAgain).
	shedding bool
	// hotBytes is the estimated footprint of the runs in memory, published
	// the last time the shared Budget was told (budget.go); hits, misses
	// and evictions are counted here until then.
	hotBytes, published     int64
	hits, misses, evictions int64
	// commits counts Committed calls: the clock of dropIdleDigests.
	commits              uint64
	nodeReads, nodeDrops int64
	tick                 uint64
	// lastChanges is how many changes the last Prepare gathered: the next
	// one's starting capacity.
	lastChanges int
	// preparing is the commit PrepareBetween is gathering, nil outside it;
	// prepareGen numbers the Prepares, and a run's preparedGen says it is
	// in the one numbered so (prepareFirst).
	preparing  *Changes
	prepareGen uint64
	// expired are the state changes of the expiries since the last commit,
	// limbo the runs expired or forgotten and not yet written
	// (retention.go).
	expired Changes
	limbo   map[string]limbo
	// measure is the buffer split encodes triggers into to measure them.
	measure []byte
	// wakeBufs are wake buffers given back for reuse (wakebuf.go), of
	// wakeBufBytes in all, and wakeNodeSlices wakes' node slices; buffer
	// and nodes are wakeBuffer and wakeNodes as func values, made once.
	wakeBufs       [][]byte
	wakeBufBytes   int
	wakeNodeSlices [][]topics.NodeDigest
	buffer         func(n int) []byte
	nodes          func(n int) []topics.NodeDigest
	// content is scratch space for events' content encodings (contentHash).
	content []byte
	// sessions indexes a store-backed projection's runs by session
	// (session.go): built by one scan of the store at the first session
	// read, kept since as runs gain a session or expire; nil until then.
	// In memory only.
	sessions map[string]map[string]struct{}
}

// New returns an empty projection held in memory only.
func New(cfg Config) (*Projection, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Projection{cfg: cfg.WithDefaults(), runs: make(map[string]*Run), dues: btree.NewG(btreeDegree, soonestFirst),
		due: make(map[string]int64), dueDirty: make(map[string]struct{}), limbo: make(map[string]limbo)}, nil
}

// Open returns the projection of a partition's storage, resuming where its
// last Commit left it: runs are loaded when first used, timers are known at
// once.
func Open(cfg Config, s Storage) (*Projection, error) {
	p, err := New(cfg)
	if err != nil {
		return nil, err
	}
	p.store = &store{kv: s}
	dues, err := p.store.dues()
	if err != nil {
		return nil, err
	}
	for run, at := range dues {
		p.due[run] = at
		p.dues.ReplaceOrInsert(timed{at, run})
	}
	return p, nil
}

// Config returns the projection's config, with defaults filled in.
func (p *Projection) Config() Config { return p.cfg }

// Err returns the sticky storage error, if any.
func (p *Projection) Err() error { return p.err }

// Run returns the run with id, loading it from the store if needed; ok is
// false when no event of it was applied (or the store failed: see Err).
func (p *Projection) Run(id string) (*Run, bool) {
	r, _ := p.run(id, false)
	return r, r != nil
}

// run returns the run with id: from memory, else from the store, else (when
// create is set) a new one.
func (p *Projection) run(id string, create bool) (*Run, error) {
	if p.err != nil {
		return nil, p.err
	}
	p.tick++
	if r, ok := p.runs[id]; ok {
		r.lastUsed = p.tick
		p.hits++
		return r, nil
	}
	var r *Run
	fresh, err := p.inLimbo(id)
	if err != nil {
		return nil, err
	}
	if p.store != nil && !fresh {
		loaded, ok, err := p.store.loadRun(id, &p.cfg)
		if ex := (*ExpiredError)(nil); errors.As(err, &ex) {
			ex.Retention = p.cfg.Retention
			return nil, err
		}
		if err != nil {
			p.err = fmt.Errorf("projection: loading run %q: %w", id, err)
			return nil, p.err
		}
		if ok {
			r = loaded
			p.misses++
		}
	}
	if r == nil {
		if !create {
			return nil, nil
		}
		r = newRun(id)
	}
	if p.store != nil && r.dirty == nil {
		r.dirty = newDirt()
		r.store = p.store
	}
	r.lastUsed = p.tick
	p.runs[id] = r
	p.account(r)
	return r, nil
}

// Apply applies a decoded event to its run. It returns the triggers raised
// (timers of the run that fell due before the event first) and whether the
// event was a duplicate, already applied and so ignored. An event that is
// not applied for another reason (its run expired, its id was applied with
// other content) is neither; ApplyEvent says why.
func (p *Projection) Apply(ev *topics.Event) (trigs []topics.Trigger, dup bool) {
	trigs, dup, _ = p.ApplyEvent(ev)
	return trigs, dup
}

// ApplyEvent is Apply with the reason an event was not applied: an
// ExpiredError when its run expired (Config.Retention), a
// DuplicateConflictError when its id is in its run's dedupe window with
// other content (the run unchanged), the sticky store error when the store
// failed. Only the last stops the projection.
func (p *Projection) ApplyEvent(ev *topics.Event) (trigs []topics.Trigger, dup bool, err error) {
	r, err := p.run(ev.RunID, true)
	if err != nil {
		return nil, false, err
	}
	if err := p.prepareFirst(r); err != nil {
		return nil, false, err
	}
	var hash uint64
	hash, p.content = contentHash(ev, p.content)
	unscoped := r.sessionID == ""
	trigs, dup, err = r.apply(ev, hash, &p.cfg)
	if unscoped && r.sessionID != "" {
		p.indexSession(r.sessionID, r.id)
	}
	if errors.Is(err, ErrDuplicateConflict) {
		return nil, false, err
	}
	if err == nil {
		err = r.nodeErr
	}
	if err != nil {
		p.err = fmt.Errorf("projection: run %q: %w", r.id, err)
		return nil, false, p.err
	}
	p.account(r)
	p.updateDue(r)
	return trigs, dup, nil
}

// Advance moves a run's clock to `to`, firing its timers due by then.
func (p *Projection) Advance(runID string, to topics.Time) []topics.Trigger {
	r, err := p.run(runID, false)
	if err != nil || r == nil {
		return nil
	}
	trigs := r.advance(to, &p.cfg, nil)
	if p.settle(r) != nil {
		return nil
	}
	p.updateDue(r)
	return trigs
}

// NextDue returns the earliest timer of any run.
func (p *Projection) NextDue() (topics.Time, bool) {
	k, ok := p.dues.Min()
	if !ok {
		return topics.Time{}, false
	}
	return topics.UnixMilliTime(k.at), true
}

// FireDue fires every timer due by now, run by run in due order. Each run's
// clock moves only to the due times of its timers, never to now, so the
// triggers and snapshots are the same as a replay's. Retention is not a
// timer of the run's: ExpireDue deletes the runs whose time is up.
func (p *Projection) FireDue(now topics.Time, pending *Pending) {
	p.eachDue(now, func(r *Run, at int64) bool {
		if _, timer := r.NextDue(); !timer {
			return false // retention's (ExpireDue), or stale
		}
		pending.Add(r.id, r.advance(topics.UnixMilliTime(at), &p.cfg, nil))
		if p.settle(r) != nil {
			return true
		}
		p.updateDue(r)
		return true
	})
}

// ExpireDue deletes every finished run whose retention (Config.Retention)
// is up by now, and every expiry marker whose own time is up, and returns
// how many runs it expired (retention.go). A run with triggers pending
// expires at the next call, once its wake is built: it needs the run.
func (p *Projection) ExpireDue(now topics.Time, pending *Pending) (expired int) {
	p.eachDue(now, func(r *Run, _ int64) bool {
		if _, timer := r.NextDue(); timer {
			return false // a timer of the run's own: FireDue's
		}
		at, ok := p.expiryDue(r)
		switch {
		case !ok || at > now.UnixMilli():
			p.updateDue(r) // stale: an event or a changed retention moved it
		case len(pending.trigs[r.id]) > 0:
			p.setDue(r.id, now.UnixMilli()+1, true)
		default:
			if err := p.expire(r, now.UnixMilli()); err != nil {
				p.err = fmt.Errorf("%w: expiring run %q: %w", ErrStore, r.id, err)
				return true
			}
			expired++
		}
		return true
	})
	return expired
}

// eachDue hands fn, in due order, every run whose due time (its next timer
// or its expiry) is by now, as long as the projection has no error: fn
// takes the run and moves its due on, or says it is not its to handle
// (false), and the run is handed no more in this call. Due entries
// without a run, and expiry markers whose time is up, are cleaned up on
// the way.
func (p *Projection) eachDue(now topics.Time, fn func(r *Run, at int64) bool) {
	var left []timed // entries fn left, put back at the end
	defer func() {
		for _, k := range left {
			p.dues.ReplaceOrInsert(k)
		}
	}()
	for p.err == nil {
		k, ok := p.dues.Min()
		if !ok || k.at > now.UnixMilli() {
			return
		}
		r, err := p.run(k.id, false)
		switch {
		case errors.Is(err, ErrRunExpired): // an expiry marker whose time is up
			p.forget(k.id)
		case err != nil:
			return
		case r == nil: // a due entry without a run: forget it
			p.setDue(k.id, 0, false)
		case !fn(r, k.at):
			p.dues.Delete(k)
			left = append(left, k)
		}
	}
}

func (p *Projection) updateDue(r *Run) {
	at, ok := r.NextDue()
	if !ok {
		if e, ok := p.expiryDue(r); ok {
			p.setDue(r.id, e, true)
			return
		}
	}
	p.setDue(r.id, at.UnixMilli(), ok)
}

func (p *Projection) setDue(run string, at int64, ok bool) {
	old, had := p.due[run]
	if had == ok && old == at {
		return
	}
	if had {
		p.dues.Delete(timed{old, run})
		delete(p.due, run)
	}
	if ok {
		p.due[run] = at
		p.dues.ReplaceOrInsert(timed{at, run})
	}
	p.dueDirty[run] = struct{}{}
}

// Commit writes every change since the last commit, and the next offset to
// consume of each input topic in offsets, in one synced Storage write: after a
// crash the projection resumes exactly from there. It is Prepare and Finish
// with nothing in between, for callers without a changelog.
func (p *Projection) Commit(offsets map[string]int64) error {
	c, err := p.Prepare(offsets)
	if err != nil {
		return err
	}
	mem := p.TakeChangeMemory()
	if err := p.Finish(c, nil); err != nil {
		return err
	}
	// In the store now, and c was Commit's own: its memory serves the
	// next commit.
	p.RecycleChangeMemory(mem)
	return nil
}

// Prepare gathers every change since the last commit, with offsets as the
// last change, and marks the runs clean. The caller makes the changes durable
// elsewhere (the changelog) and then calls Finish; if that fails, the
// projection no longer matches its store and must be dropped and reopened.
func (p *Projection) Prepare(offsets map[string]int64) (Changes, error) {
	return p.PrepareBetween(offsets, nil)
}

// PrepareBetween is Prepare, calling between (when not nil) between two
// runs it gathers, as WakesBetween does between two wakes: a large
// commit's changes take a while to encode, and the caller may apply events
// meanwhile (human input that must not wait for the commit). What an event
// applied meanwhile changes is not part of this commit but of the next,
// which carries its offset: before an event changes a run this commit has
// not yet gathered, its changes so far are gathered first (prepareFirst),
// and the timer index is taken before the first call. offsets must not
// change meanwhile: the caller passes a copy.
func (p *Projection) PrepareBetween(offsets map[string]int64, between func()) (Changes, error) {
	if p.err != nil {
		return nil, p.err
	}
	if p.store == nil {
		return nil, nil
	}
	// Sized like the last commit's: appending a large commit's changes one
	// by one reallocated the slice a dozen times. In memory given back
	// (RecycleChangeMemory) when there is some: the slice, and the arena
	// the changes are encoded in. A previous commit's memory not taken
	// (TakeChangeMemory) is left to its changes.
	s := p.store
	c := s.freeChanges
	s.freeChanges = nil
	if cap(c) < p.lastChanges {
		c = make(Changes, 0, p.lastChanges)
	}
	s.arena, s.prepared = arena{}, nil
	defer func() { p.lastChanges, s.prepared = len(c), c }()
	// Room for the next commit only while memory is plentiful.
	p.store.lean(p.lean())
	// The timer index as it is now: what events applied meanwhile change
	// in it goes with the next commit.
	var dues Changes
	for run := range p.dueDirty {
		at, ok := p.due[run]
		putDue(&dues, run, at, ok)
	}
	clear(p.dueDirty)
	p.prepareGen++
	p.preparing = &c
	defer func() { p.preparing = nil }()
	for _, r := range p.runs {
		if r.preparedGen == p.prepareGen {
			continue // gathered before an event changed it (prepareFirst)
		}
		r.preparedGen = p.prepareGen
		if err := p.store.write(&c, r, p.cfg.journalKeep()); err != nil {
			p.err = fmt.Errorf("%w: commit: %w", ErrStore, err)
			return nil, p.err
		}
		if between != nil {
			between()
			if p.err != nil {
				return nil, p.err
			}
		}
	}
	p.prepareExpiries(&c)
	c = append(c, dues...)
	if err := putOffsets(&c, offsets); err != nil {
		p.err = fmt.Errorf("%w: commit: %w", ErrStore, err)
		return nil, p.err
	}
	return c, nil
}

// prepareFirst gathers r's changes into the commit being prepared, if one
// is (PrepareBetween's between) and r is not in it yet, before an event
// changes r: the commit holds the state its offsets reach, and the event's
// changes go with the next.
func (p *Projection) prepareFirst(r *Run) error {
	if p.preparing == nil || r.preparedGen == p.prepareGen {
		return nil
	}
	r.preparedGen = p.prepareGen
	if err := p.store.write(p.preparing, r, p.cfg.journalKeep()); err != nil {
		p.err = fmt.Errorf("%w: commit: %w", ErrStore, err)
		return p.err
	}
	return nil
}

// Finish writes prepared changes (and the changelog checkpoint they reach,
// when there is one) to the store in one batch. Then, if more than
// MaxHotNodes nodes are in memory, the least recently used runs are dropped
// from memory (they stay in the store).
//
// Without a checkpoint the store is the only copy of the state, and the
// batch is synced. With one, the changes are already durable in the
// changelog, so the batch is not synced: a machine crash can only leave the
// store at an earlier checkpoint (Pebble, internal/store, recovers a prefix
// of its batches), and restoring from the changelog, which every owner does
// first, replays the rest. A process crash loses nothing either way.
func (p *Projection) Finish(c Changes, cp *Checkpoint) error {
	if p.err != nil {
		return p.err
	}
	return p.Committed(p.Write(c, cp))
}

// Write is Finish's first half: it writes prepared changes and the
// checkpoint to the store in one batch. Alone of the methods it may run on
// another goroutine than the one applying, concurrently with Apply, Wakes
// and Prepare of later events (the projector's worker commits one batch
// while it applies the next): it reads nothing but the store, whose keys the
// changes already hold, and Prepare made c the only holder of its bytes.
// Committed must follow, on the applying goroutine, before the next Prepare.
func (p *Projection) Write(c Changes, cp *Checkpoint) error {
	if p.store == nil {
		return nil
	}
	if err := p.store.kv.Write(c, cp, cp == nil); err != nil {
		return fmt.Errorf("projection: commit: %w", err)
	}
	return nil
}

// Committed is Finish's second half, on the applying goroutine, with
// Write's result: an error sticks (the state no longer matches the store),
// else runs beyond MaxHotNodes are dropped from memory. Only runs with
// nothing left to write are dropped: all their changes are in the store, so
// reading them back gives the same run.
func (p *Projection) Committed(err error) error {
	if p.err != nil {
		return p.err
	}
	if err != nil {
		p.err = err
		return err
	}
	p.expiriesWritten()
	p.evict()
	p.dropIdleDigests()
	return nil
}

// RunIDs returns the ids of every run in memory, in no particular order.
func (p *Projection) RunIDs() []string {
	ids := make([]string, 0, len(p.runs))
	for id := range p.runs {
		ids = append(ids, id)
	}
	return ids
}

// Pending gathers the triggers of one processing batch, per run, so that each
// run is woken once per batch (DESIGN.md "Wakes out").
type Pending struct {
	order []string
	trigs map[string][]topics.Trigger
	most  int
}

// Add appends triggers of a run.
func (b *Pending) Add(runID string, trigs []topics.Trigger) {
	if len(trigs) == 0 {
		return
	}
	if b.trigs == nil {
		b.trigs = make(map[string][]topics.Trigger)
	}
	if _, ok := b.trigs[runID]; !ok {
		b.order = append(b.order, runID)
	}
	b.trigs[runID] = append(b.trigs[runID], trigs...)
	b.most = max(b.most, len(b.trigs[runID]))
}

// Take removes the triggers of a run from b and returns them.
func (b *Pending) Take(runID string) []topics.Trigger {
	trigs, ok := b.trigs[runID]
	if !ok {
		return nil
	}
	delete(b.trigs, runID)
	b.order = slices.DeleteFunc(b.order, func(id string) bool { return id == runID })
	b.most = 0
	for _, t := range b.trigs {
		b.most = max(b.most, len(t))
	}
	return trigs
}

// Merge adds o's triggers to b, run by run in o's order.
func (b *Pending) Merge(o *Pending) {
	for _, id := range o.order {
		b.Add(id, o.trigs[id])
	}
}

// Len is the number of runs with pending triggers.
func (b *Pending) Len() int { return len(b.order) }

// Most is the largest number of triggers pending for one run: a caller that
// gathers triggers over many events bounds with it how many a run's wakes
// hold (however many, Wakes splits them into wakes within the bounds).
func (b *Pending) Most() int { return b.most }

// Reset empties b for the next batch.
func (b *Pending) Reset() {
	b.order = b.order[:0]
	clear(b.trigs)
	b.most = 0
}

// Built is a wake ready to publish, with its snapshot's metadata.
type Built struct {
	Wake *topics.Wake
	Info snapshot.Info
	// Build is how long the snapshot took to build: telemetry only, never
	// part of the wake.
	Build time.Duration
}

// Wakes builds the wakes of b: one per run, or, for a run whose triggers
// do not fit one wake (Config.MaxWakeTriggers, Config.MaxWakeBytes),
// several consecutive parts of them (split). Priority-lane wakes come
// first, then normal ones, each in the order their runs were first
// triggered. source is the time up to which the projection reflects its
// input (zero: each run's clock); now is the wall clock for generated_at
// and staleness (zero: each run's clock, which makes the whole wake a pure
// function of the input, as replay wants).
func (p *Projection) Wakes(b *Pending, now time.Time, source topics.Time) ([]Built, error) {
	return p.WakesBetween(b, now, source, nil)
}

// WakesBetween is Wakes that calls between, when not nil, after each wake it
// builds (each part of a split one too), so that its caller can attend to
// something more urgent between two (the projector applies human input
// there and publishes its wake on the priority path, while a large
// commit's wakes are built). between may apply events and build other
// wakes, but must leave b alone; a wake built after it reflects what it
// applied.
func (p *Projection) WakesBetween(b *Pending, now time.Time, source topics.Time, between func()) ([]Built, error) {
	out := make([]Built, 0, len(b.order))
	for _, lane := range []topics.Lane{topics.LanePriority, topics.LaneNormal} {
		for _, id := range b.order {
			trigs := b.trigs[id]
			// Every part goes on the lane the whole would take: the parts
			// of a run are consecutive in one partition of one topic.
			if laneOf(trigs) != lane {
				continue
			}
			parts := p.split(trigs)
			for i, part := range parts {
				began := time.Now() // monotonic, for Built.Build only
				r := p.runs[id]
				if r == nil {
					// A run with triggers pending stays in memory (evict and
					// expire skip it): this is a bug, reported, not a panic.
					return out, fmt.Errorf("projection: run %q has triggers pending but is not in memory", id)
				}
				var n *topics.WakePart
				if len(parts) > 1 {
					n = &topics.WakePart{Number: i + 1, Count: len(parts)}
				}
				w, info, err := p.wake(r, lane, part, n, now, source)
				if err == nil {
					err = p.settle(r)
				}
				if err != nil {
					return out, err
				}
				out = append(out, Built{w, info, time.Since(began)})
				if between != nil {
					between()
				}
			}
		}
	}
	return out, nil
}

// split cuts a run's triggers, in their order, into consecutive parts that
// each make a wake within the bounds (docs/CONTRACT.md "Wake size"): at most
// Config.MaxWakeTriggers triggers, whose encodings (with their ids cut at
// Limits.MaxStringLength, as a wake carries them, and the commas between)
// fit Config.triggerBudget, what Config.MaxWakeBytes leaves beside a
// snapshot at its byte budget and the widest envelope, and which name at
// most topics.MaxAckAgents agents in acknowledged triggers, so that one
// acknowledgement covers each part. A wake's snapshot never takes more
// than its budget, its ids are never cut longer than at MaxStringLength,
// and its envelope never takes more than the widest: so every part fits,
// and where the parts are cut depends only on the triggers and the
// config, never on the snapshot built. Most runs have one part: trigs
// itself.
func (p *Projection) split(trigs []topics.Trigger) [][]topics.Trigger {
	most, budget := p.cfg.MaxWakeTriggers, p.cfg.triggerBudget()
	widest := topics.MaxTriggerJSONBytes()
	if len(trigs) <= min(most, topics.MaxAckAgents) && len(trigs)*(widest+1) <= budget {
		return [][]topics.Trigger{trigs} // they fit even at their widest
	}
	cut := cutTriggers(trigs, p.cfg.Limits.MaxStringLength)
	var parts [][]topics.Trigger
	start, used := 0, 0
	// acked are the agents the part's acknowledgement names: one
	// conductor.wake_received names at most topics.MaxAckAgents.
	acked := map[string]struct{}{}
	for i := range cut {
		enc, err := cut[i].AppendJSON(p.measure[:0])
		p.measure = enc[:0]
		size := len(enc)
		if err != nil {
			// A time encoding/json refuses: the wake will not encode
			// either, and says so. Counted at the widest meanwhile.
			size = widest
		}
		ack := false
		if cut[i].Kind.Acknowledged() {
			_, named := acked[cut[i].AgentID]
			ack = !named
		}
		if i > start && (i-start == most || used+1+size > budget || ack && len(acked) == topics.MaxAckAgents) {
			parts = append(parts, trigs[start:i])
			start, used = i, 0
			clear(acked)
		}
		if i > start {
			used++ // the comma before it
		}
		used += size
		if ack {
			acked[cut[i].AgentID] = struct{}{}
		}
	}
	return append(parts, trigs[start:])
}

// laneOf is the lane of a wake of trigs, the one place a wake's lane is
// decided: priority when any trigger is human input (a human must always
// be able to interrupt, and the conductor reads the priority topic
// first), else normal. Every part of a split wake takes the lane of the
// whole (WakesBetween). Which triggers reach a wake of human input first
// is the projector's business (internal/projector, priority.go).
func laneOf(trigs []topics.Trigger) topics.Lane {
	for _, t := range trigs {
		if t.Kind == topics.TriggerHumanInput {
			return topics.LanePriority
		}
	}
	return topics.LaneNormal
}

// wake builds the wake of triggers of r: part, when not nil, says which
// part of a split it is, and gives it its own id. A panic while building
// it is returned as a WakeError.
func (p *Projection) wake(r *Run, lane topics.Lane, trigs []topics.Trigger, part *topics.WakePart, now time.Time, source topics.Time) (_ *topics.Wake, _ snapshot.Info, err error) {
	defer recoverWake(r.id, &err)
	id := WakeID(r.id, r.seq, trigs)
	if part != nil {
		id = ids.WakePart(r.id, r.seq, trigs, part.Number, part.Count)
	}
	w := snapshot.Wake{
		SnapshotID: ids.Derive(id.Time(), "snapshot", id.String()).String(),
		Seq:        r.seq,
		At:         r.clock,
		Source:     source,
	}
	for _, t := range trigs {
		w.AgentIDs = append(w.AgentIDs, t.AgentID)
		if t.CorrelationID != nil {
			w.CorrelationIDs = append(w.CorrelationIDs, *t.CorrelationID)
		}
	}
	if now.IsZero() {
		now = r.clock.Std()
	}
	wake := &topics.Wake{
		WakeID:        id.String(),
		SchemaVersion: topics.WakeSchemaVersion,
		RunID:         r.id,
		Lane:          lane,
		Part:          part,
		Triggers:      trigs,
	}
	// Room for the envelope before the snapshot's encoding, so that the
	// wake's bytes can be written around it (topics.WakeJSONAround). Cut
	// triggers are no longer; if they were, the wake's encoder copies.
	w.Room = wake.EnvelopeJSONLen()
	if p.buffer == nil {
		p.buffer, p.nodes = p.wakeBuffer, p.wakeNodes
	}
	w.Buffer, w.Nodes = p.buffer, p.nodes
	r.woken = p.commits
	s, info, err := snapshot.Build(r, w, p.cfg.Limits, now)
	if err != nil {
		return nil, info, &WakeError{Run: r.id, Err: err}
	}
	wake.Triggers = cutTriggers(trigs, info.Cut)
	wake.AgentTreeSnapshot = *s
	return wake, info, nil
}

// cutTriggers returns trigs with their agent and correlation ids cut as the
// snapshot cuts ids (snapshot.CutID), so that a trigger's agent matches its
// node and its correlation id the snapshot's handle however long the ids:
// a copy when an id is cut, trigs itself when none is.
func cutTriggers(trigs []topics.Trigger, limit int) []topics.Trigger {
	var out []topics.Trigger
	for i, t := range trigs {
		agent, cutAgent := snapshot.CutID(t.AgentID, limit)
		var corr string
		cutCorr := false
		if t.CorrelationID != nil {
			corr, cutCorr = snapshot.CutID(*t.CorrelationID, limit)
		}
		if !cutAgent && !cutCorr {
			continue
		}
		if out == nil {
			out = slices.Clone(trigs)
		}
		out[i].AgentID = agent
		if cutCorr {
			out[i].CorrelationID = &corr
		}
	}
	if out == nil {
		return trigs
	}
	return out
}

// Snapshot builds the current snapshot of a run, for readers rather than for a
// wake: no node is referenced, and its id derives from the run and its seq.
// ErrUnknownRun when no event of the run was applied, an ExpiredError when
// it expired.
func (p *Projection) Snapshot(runID string, now time.Time) (*topics.AgentTreeSnapshot, snapshot.Info, error) {
	return p.CurrentSnapshot(runID, now, topics.Time{})
}

// CurrentSnapshot is Snapshot with the time up to which the projection
// reflects its input (zero: the run's clock), which snapshot_age_ms and
// stale are measured from, as in Wakes.
func (p *Projection) CurrentSnapshot(runID string, now time.Time, source topics.Time) (*topics.AgentTreeSnapshot, snapshot.Info, error) {
	r, err := p.Lookup(runID)
	if err != nil {
		return nil, snapshot.Info{}, err
	}
	w := snapshot.Wake{
		SnapshotID: ids.Derive(uint64(max(r.clock.UnixMilli(), 0)), "current", r.id, fmt.Sprint(r.seq)).String(),
		Seq:        r.seq,
		At:         r.clock,
		Source:     source,
	}
	s, info, err := snapshot.Build(r, w, p.cfg.Limits, now)
	if err == nil {
		err = p.settle(r)
	}
	return s, info, err
}

// WakeID is the deterministic id of the wake for triggers of run at seq (the
// run's applied event count when the wake is built): a ULID whose time is the
// newest trigger's and whose entropy is a hash of the run, the seq and the
// triggers. Two wakes with one id therefore have the same triggers and the
// same state behind their snapshots; the same input log gives the same wake
// ids on every instance and every replay, and a conductor can drop
// duplicates by id. It is ids.Wake, where canopy's deterministic ids are
// derived.
func WakeID(run string, seq int64, trigs []topics.Trigger) ulid.ULID {
	return ids.Wake(run, seq, trigs)
}
