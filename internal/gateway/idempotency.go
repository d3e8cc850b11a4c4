package gateway

import (
	"container/list"
	"context"
	"net/http"
	"sync"

	"github.com/canopy-dev/canopy/internal/problem"
	"github.com/canopy-dev/canopy/pkg/ids"
)

// idempotentEventID derives the event id of an input sent with an
// Idempotency-Key from who sent it, for which run, under which key: every
// gateway instance derives the same id, so a retry that reaches another
// instance produces a duplicate the projector applies once (it de-duplicates
// by event id). It is shaped as a ULID, the contract's convention.
func idempotentEventID(subject, run, key string) string {
	return ids.Input(subject, run, key).String()
}

// accepted is the answer to an accepted input.
type accepted struct {
	EventID   string `json:"event_id"`
	RunID     string `json:"run_id"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// idemEntry is one remembered Idempotency-Key: the request's fingerprint and,
// once done, its answer. done is closed when the first request finished.
type idemEntry struct {
	key    string
	sum    [32]byte
	done   chan struct{}
	result *accepted
	elem   *list.Element
}

// idemCache remembers the first answer to recent Idempotency-Keys, bounded
// to n keys (least recently used go first), so that a retry to the same
// instance gets the same partition and offset without producing again.
type idemCache struct {
	mu  sync.Mutex
	n   int
	m   map[string]*idemEntry
	lru *list.List
}

func newIdemCache(n int) *idemCache {
	return &idemCache{n: n, m: make(map[string]*idemEntry), lru: list.New()}
}

// begin looks key up. When it is new, it is reserved and returned as
// owner: the caller produces and must call finish with it. Otherwise begin
// waits for the first request with the key to finish and returns its
// answer; a different body under the same key is a 422 (the
// Idempotency-Key draft's answer to a key reused for another request).
func (c *idemCache) begin(ctx context.Context, key string, sum [32]byte) (res *accepted, owner *idemEntry, err error) {
	for {
		c.mu.Lock()
		e, ok := c.m[key]
		if !ok {
			e = &idemEntry{key: key, sum: sum, done: make(chan struct{})}
			e.elem = c.lru.PushFront(e)
			c.m[key] = e
			for c.lru.Len() > c.n {
				old := c.lru.Remove(c.lru.Back()).(*idemEntry)
				delete(c.m, old.key)
			}
			c.mu.Unlock()
			return nil, e, nil
		}
		c.lru.MoveToFront(e.elem)
		c.mu.Unlock()
		if e.sum != sum {
			return nil, nil, problem.New(http.StatusUnprocessableEntity, problem.Conflict,
				"this Idempotency-Key was used with a different request body; use a new key for a new input")
		}
		select {
		case <-e.done:
		case <-ctx.Done():
			return nil, nil, problem.New(http.StatusServiceUnavailable, problem.Unavailable, "gave up waiting for the first request with this Idempotency-Key")
		}
		if e.result != nil {
			return e.result, nil, nil
		}
		// The first attempt failed and was forgotten: try to become the owner.
	}
}

// finish records the owner's outcome: an answer is remembered; a failure
// forgets the key so that a retry produces again (with the same event id).
func (c *idemCache) finish(e *idemEntry, res *accepted) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.result = res
	if res == nil && c.m[e.key] == e {
		c.lru.Remove(e.elem)
		delete(c.m, e.key)
	}
	close(e.done)
}
