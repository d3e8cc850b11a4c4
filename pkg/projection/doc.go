// Package projection turns a run's events into its tree state and decides when
// the conductor must be woken.
//
// A Run holds one run's nodes and the indexes seed 000's inclusion order needs
// (blocked and failed nodes by status time, held leases by expiry, every node
// by last signal, nodes by correlation id, active correlation handles), kept
// up to date on every event so that building a snapshot reads only the top of
// each index (see package snapshot). A Run is owned by one goroutine: nothing
// here locks.
//
// Time inside a run is logical: the run's clock is the newest event time it
// has applied, or the due time a timer was advanced to. Lease remaining time,
// overdue leases, request TTLs, the watchdog SLA and the progress wake interval
// are all measured on it, so the same events give the same state, triggers and
// snapshots on every instance and every replay. The projector advances clocks
// from the wall clock only to fire timers of runs that have gone quiet.
package projection
