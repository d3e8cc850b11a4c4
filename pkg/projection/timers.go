package projection

import (
	"github.com/google/btree"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// timer kinds, in the order timers due at the same instant fire.
const (
	timerLease = iota
	timerDispatch
	timerGrace
	timerRequest
	numTimers
)

func (r *Run) timerTrees() [numTimers]*btree.BTreeG[timed] {
	return [numTimers]*btree.BTreeG[timed]{r.leaseDue, r.dispatchDue, r.graceDue, r.requestDue}
}

// NextDue returns the earliest time a timer of the run falls due.
func (r *Run) NextDue() (topics.Time, bool) {
	var best timed
	found := false
	for _, t := range r.timerTrees() {
		if k, ok := t.Min(); ok && (!found || k.at < best.at) {
			best, found = k, true
		}
	}
	if !found {
		return topics.Time{}, false
	}
	return topics.UnixMilliTime(best.at), true
}

// advance moves the run's clock forward to `to` (never back), firing every
// timer due by then in time order, each at its own due time, and appends the
// triggers they raise.
func (r *Run) advance(to topics.Time, cfg *Config, trigs []topics.Trigger) []topics.Trigger {
	trees := r.timerTrees()
	for {
		kind, key := -1, timed{}
		for i, t := range trees {
			if k, ok := t.Min(); ok && k.at <= to.UnixMilli() && (kind < 0 || k.at < key.at) {
				kind, key = i, k
			}
		}
		if kind < 0 {
			break
		}
		trees[kind].Delete(key)
		due := topics.UnixMilliTime(key.at)
		if due.After(r.clock) {
			r.clock = due
		}
		trigs = r.fire(kind, key.id, due, trigs)
	}
	if to.After(r.clock) {
		r.clock = to
	}
	if r.dirty != nil {
		r.dirty.meta = true
	}
	return trigs
}

func (r *Run) fire(kind int, id string, due topics.Time, trigs []topics.Trigger) []topics.Trigger {
	timer := func(k topics.TriggerKind, agentID, detail string) {
		trigs = append(trigs, topics.Trigger{Kind: k, AgentID: agentID, At: due, Detail: strPtr(detail)})
	}
	if kind != timerRequest {
		r.mark('n', id)
	}
	switch kind {
	case timerLease:
		n := r.get(id)
		if n == nil { // a failed read: nodeErr stops the projection
			break
		}
		n.overdue = true
		r.stats.OverdueLeases++
		r.diagnose("lease_expired", id, due, n.LeaseOwner)
		timer(topics.TriggerLeaseExpired, id, n.LeaseOwner)
	case timerDispatch:
		n := r.get(id)
		if n == nil { // a failed read: nodeErr stops the projection
			break
		}
		n.watchdog.wasSuspect = true
		if r.reclassify(n, due) {
			r.diagnose(string(n.watchdog.Status), id, due, n.watchdog.StatusReason)
			timer(topics.TriggerWatchdog, id, string(n.watchdog.Status))
		}
	case timerGrace:
		n := r.get(id)
		if n == nil { // a failed read: nodeErr stops the projection
			break
		}
		n.watchdog.graceDue = topics.Time{}
		if n.watchdog.Status == topics.WatchdogDoneButNotForwarded {
			r.diagnose(string(topics.WatchdogDoneButNotForwarded), id, due, "no wake_received within the forward grace")
			timer(topics.TriggerWatchdog, id, string(topics.WatchdogDoneButNotForwarded))
		}
	case timerRequest:
		if q, ok := r.requests[id]; ok {
			r.closeRequest(q)
		}
	}
	return trigs
}
