package projector

import (
	"context"
	"errors"
	"testing"

	"github.com/canopy-dev/canopy/internal/kafkaconn"
)

// TestSupervisorCountsReplacedRestores: the Supervisor answers for the instance it
// runs now, and its RestoredRecords go on across a replacement (a replaced
// instance's restores stay counted), so that restored_records_total never
// goes back when an instance fails. Without an instance its reads say so.
func TestSupervisorCountsReplacedRestores(t *testing.T) {
	s, err := NewSupervisor(Config{Kafka: kafkaconn.Conn{Brokers: []string{"127.0.0.1:1"}}, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if st := s.Status(); st.Running || st.Counts != (Counts{}) {
		t.Fatalf("no instance yet: %+v, running %v", st.Counts, st.Running)
	}
	if ok, why := s.Ready(); ok || why == "" {
		t.Errorf("Ready without an instance: %v %q", ok, why)
	}
	if _, err := s.Snapshot(context.Background(), "run-1"); !errors.Is(err, ErrNoInstance) {
		t.Errorf("Snapshot without an instance: %v, want ErrNoInstance", err)
	}
	a, b := &Projector{}, &Projector{}
	a.stats.RestoredRecords.Store(100)
	a.stats.Restoring.Store(1)
	s.swap(a)
	if st := s.Status(); !st.Running || st.Counts.RestoredRecords != 100 || st.Counts.Restoring != 1 {
		t.Fatalf("first instance: %+v, running %v; want 100 restored, 1 restoring", st.Counts, st.Running)
	}
	a.stats.RestoredRecords.Store(120) // it went on before it failed
	b.stats.RestoredRecords.Store(7)
	s.swap(b)
	if c := s.Status().Counts; c.RestoredRecords != 127 || c.Restoring != 0 {
		t.Fatalf("after a replacement: %+v; want 127 restored (120 + 7), none restoring", c)
	}
	s.swap(b) // the same instance again counts nothing twice
	if c := s.Status().Counts; c.RestoredRecords != 127 {
		t.Fatalf("after swapping in the same instance: %d restored, want 127", c.RestoredRecords)
	}
}
