package projection

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// HistoryEntry is one applied event of a run, as the bounded history window
// keeps it (seed 003 "History windows"): ids, enums and times only, never
// the event's free text or payload.
type HistoryEntry struct {
	// Seq is the event's position in the run: the run's as_of_event_seq
	// right after it was applied (1 for the first event).
	Seq int64 `json:"seq"`
	// EventID is the event's id (CloudEvents id).
	EventID string `json:"event_id"`
	// Type is the event's type, e.g. "tree.node_created".
	Type string `json:"type"`
	// AgentID is the node the event is about.
	AgentID string `json:"agent_id"`
	// At is the event's occurred_at.
	At topics.Time `json:"at"`
	// CorrelationID is the event's correlation id; null when it had none.
	CorrelationID *string `json:"correlation_id"`
	// Status is the node's status after the event, when the event set or
	// changed it; null when it left the status alone.
	Status *topics.Status `json:"status"`
}

// HistoryPage is one window of a run's history, newest event first.
type HistoryPage struct {
	// RunID is the run.
	RunID string `json:"run_id"`
	// AsOfEventSeq is the run's event count when the page was read.
	AsOfEventSeq int64 `json:"as_of_event_seq"`
	// Entries are at most the requested limit, newest first.
	Entries []HistoryEntry `json:"entries"`
	// NextCursor continues with the entries older than the last one here;
	// empty when the window holds no older entry.
	NextCursor string `json:"next_cursor"`
	// OldestRetainedSeq is the seq of the oldest entry the window still
	// holds (0 when it holds none).
	OldestRetainedSeq int64 `json:"oldest_retained_seq"`
	// Truncated is true when events older than the window were applied but
	// are no longer kept: the history is bounded, and an empty NextCursor
	// then means "no more is kept", not "the run began here".
	Truncated bool `json:"truncated"`
	// WindowSize is how many entries the window keeps (Config.HistorySize).
	WindowSize int `json:"window_size"`
}

// History paging bounds: a page holds DefaultHistoryLimit entries when the
// limit is 0, and at most the whole window (Config.HistorySize), or
// MaxHistoryLimit when the window is smaller (MaxPage).
const (
	DefaultHistoryLimit = 20
	MaxHistoryLimit     = 100
)

// MaxPage is the largest history limit a projection with a window of size
// entries accepts: the whole window, and never less than MaxHistoryLimit.
func MaxPage(size int) int { return max(MaxHistoryLimit, size) }

var (
	// ErrUnknownRun is returned for a run of which no event was applied.
	ErrUnknownRun = errors.New("projection: unknown run")
	// ErrBadCursor is returned for a cursor of a paged read (history,
	// nodes, session) this projection did not hand out.
	ErrBadCursor = errors.New("projection: bad cursor")
	// ErrBadLimit is returned for a paged read's limit out of its range
	// (a history's 0..MaxPage).
	ErrBadLimit = errors.New("projection: bad limit")
)

// EncodeCursor returns the opaque cursor that continues a history below seq.
// It is base64url (no padding) of seq's 8 big-endian bytes: opaque to
// readers, so that its meaning can change without breaking them.
func EncodeCursor(seq int64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(seq))
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// DecodeCursor is EncodeCursor's inverse; the empty cursor is the newest
// end of the history (seq 0 meaning "no bound").
func DecodeCursor(c string) (int64, error) {
	if c == "" {
		return 0, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) != 8 {
		return 0, fmt.Errorf("%w: %q", ErrBadCursor, c)
	}
	seq := int64(binary.BigEndian.Uint64(b))
	if seq < 1 {
		return 0, fmt.Errorf("%w: %q", ErrBadCursor, c)
	}
	return seq, nil
}

// history is a run's ring of its last applied events, oldest first from
// head once full.
type history struct {
	entries []HistoryEntry
	head    int // index of the oldest entry once len(entries) == cap
}

func (h *history) len() int { return len(h.entries) }

// at returns the i-th newest entry (0 = newest).
func (h *history) at(i int) *HistoryEntry {
	n := len(h.entries)
	return &h.entries[(h.head+n-1-i)%n]
}

// push appends e, dropping the oldest entry when size are held.
func (h *history) push(e HistoryEntry, size int) {
	if len(h.entries) < size {
		if h.entries == nil {
			// Most runs are small: grow as needed rather than reserving the
			// whole window for each.
			h.entries = make([]HistoryEntry, 0, min(size, 16))
		}
		h.entries = append(h.entries, e)
		return
	}
	h.entries[h.head] = e
	h.head = (h.head + 1) % len(h.entries)
}

// record adds ev, whose content hashes to hash, just applied to node n as
// the run's seq-th event, to the run's history window and journal.
func (r *Run) record(ev *topics.Event, hash uint64, n *node, before topics.Status, cfg *Config) {
	e := HistoryEntry{Seq: r.seq, EventID: ev.ID, Type: string(ev.Type), AgentID: ev.AgentID, At: ev.Time,
		CorrelationID: strPtr(ev.CorrelationID)}
	switch ev.Data.(type) {
	case *topics.NodeStatus, *topics.NodeCompleted, *topics.Failed:
		s := n.Status
		e.Status = &s
	default:
		if n.Status != before {
			s := n.Status
			e.Status = &s
		}
	}
	if cfg.HistorySize > 0 {
		r.hist.push(e, cfg.HistorySize)
	}
	if d := r.dirty; d != nil {
		if len(d.journal) == cap(d.journal) && r.store != nil {
			if grown := r.store.growJournal(d.journal); grown != nil {
				d.journal = grown
			}
		}
		d.journal = append(d.journal, journalEntry{e, hash})
	}
}

// History returns a page of the run's history window: up to limit entries
// (0: DefaultHistoryLimit) older than the cursor's position, newest first.
func (r *Run) History(cursor string, limit int, size int) (*HistoryPage, error) {
	if limit == 0 {
		limit = DefaultHistoryLimit
	}
	if limit < 1 || limit > MaxPage(size) {
		return nil, fmt.Errorf("%w: %d, want 1 to %d", ErrBadLimit, limit, MaxPage(size))
	}
	below, err := DecodeCursor(cursor)
	if err != nil {
		return nil, err
	}
	pg := &HistoryPage{RunID: r.id, AsOfEventSeq: r.seq, Entries: []HistoryEntry{}, WindowSize: max(size, 0)}
	n := r.hist.len()
	if n > 0 {
		pg.OldestRetainedSeq = r.hist.at(n - 1).Seq
	}
	pg.Truncated = r.seq > int64(n)
	// Entries are in seq order, newest at 0: skip those at or above the
	// cursor. A window is at most a few hundred entries, so a linear skip
	// is cheaper than anything cleverer.
	i := 0
	for below != 0 && i < n && r.hist.at(i).Seq >= below {
		i++
	}
	for ; i < n && len(pg.Entries) < limit; i++ {
		pg.Entries = append(pg.Entries, *r.hist.at(i))
	}
	if i < n && len(pg.Entries) > 0 {
		pg.NextCursor = EncodeCursor(pg.Entries[len(pg.Entries)-1].Seq)
	}
	return pg, nil
}

// History returns a page of run's history window (see Run.History);
// ErrUnknownRun when no event of the run was applied, an
// ExpiredError when it expired.
func (p *Projection) History(runID, cursor string, limit int) (*HistoryPage, error) {
	r, err := p.run(runID, false)
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownRun, runID)
	}
	return r.History(cursor, limit, p.cfg.HistorySize)
}

// historyRecord is a history entry's persisted form in earlier builds, under key
// 'r' run 0x00 'h' seq (8 bytes, big endian).
type historyRecord struct {
	EventID string `json:"id"`
	Type    string `json:"type"`
	AgentID string `json:"agent"`
	At      int64  `json:"at"`
	Corr    string `json:"corr,omitempty"`
	Status  string `json:"status,omitempty"`
}

func (r historyRecord) entry(seq int64) HistoryEntry {
	e := HistoryEntry{Seq: seq, EventID: r.EventID, Type: r.Type, AgentID: r.AgentID, At: fromMs(r.At),
		CorrelationID: strPtr(r.Corr)}
	if r.Status != "" {
		s := topics.Status(r.Status)
		e.Status = &s
	}
	return e
}
