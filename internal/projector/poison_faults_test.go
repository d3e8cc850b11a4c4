//go:build faults

package projector

import (
	"errors"
	"slices"
	"testing"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestPoisonRecordInjected: a partition with a record that brings out a
// bug every time (a panic while applying it, a wake that cannot be built,
// one that cannot be encoded: injected, faults.go) among good ones
// dead-letters it after three failures alone and projects the rest exactly
// once, on both brokers.
func TestPoisonRecordInjected(t *testing.T) {
	fault := errors.New("injected: this wake cannot be made")
	names := func(w *topics.Wake) bool {
		return slices.ContainsFunc(w.Triggers, func(tr topics.Trigger) bool { return tr.EventID != nil && *tr.EventID == poisonID })
	}
	fails := func(w *topics.Wake) error {
		if names(w) {
			return fault
		}
		return nil
	}
	for _, c := range []struct {
		kind, says string
		f          faults
	}{
		{"apply-panics", "panic while applying", faults{apply: func(ev *topics.Event) {
			if ev.ID == poisonID {
				panic("injected: applying this event brings out a bug")
			}
		}}},
		{"build-fails", fault.Error(), faults{build: fails}},
		{"encode-fails", fault.Error(), faults{encode: fails}},
	} {
		brokertest.Run(t, func(t *testing.T, b *brokertest.Broker) {
			t.Run(c.kind, func(t *testing.T) {
				injected.Store(&c.f)
				t.Cleanup(func() { injected.Store(nil) })
				testPoisonRecord(t, b, c.kind, c.says)
			})
		})
	}
}
