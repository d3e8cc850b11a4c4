package wake

// seen remembers the last n wake ids in a ring, so that memory stays bounded
// however long the conductor runs. A duplicate of a wake older than the
// last n is not caught; with read_committed consumption duplicates come only
// from redelivery after a restart or rebalance (the last few wakes) or from
// a projector run at least once, both well within the default 10,000.
type seen struct {
	ids  map[string]struct{}
	ring []string
	next int
}

func newSeen(n int) *seen { return &seen{ids: make(map[string]struct{}, n), ring: make([]string, n)} }

// add records id and reports whether it was already there.
func (s *seen) add(id string) (dup bool) {
	if _, ok := s.ids[id]; ok {
		return true
	}
	if old := s.ring[s.next]; old != "" {
		delete(s.ids, old)
	}
	s.ring[s.next] = id
	s.ids[id] = struct{}{}
	s.next = (s.next + 1) % len(s.ring)
	return false
}
