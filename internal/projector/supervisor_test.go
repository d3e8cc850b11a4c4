package projector

import (
	"context"
	"errors"
	"testing"
	"time"

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

// TestSupervisorReportsTheIntake: the Supervisor's Status (what the
// metrics read) carries its instance's intake: the bytes queued for the
// partitions and the governor's pauses, as the instance's own does.
func TestSupervisorReportsTheIntake(t *testing.T) {
	s, err := NewSupervisor(Config{Kafka: kafkaconn.Conn{Brokers: []string{"127.0.0.1:1"}}, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	p := &Projector{}
	p.gov = &governor{p: p}
	p.gov.throttles.Store(3)
	p.gov.throttledNanos.Store(int64(2 * time.Second))
	p.gov.throttling.Store(true)
	w := &worker{p: p}
	w.in.pendingBytes.Store(5 << 20)
	p.workers = map[int32]*worker{0: w}
	s.swap(p)
	st := s.Status()
	if st.QueuedBytes != 5<<20 || st.Counts.Throttles != 3 || st.Counts.Throttled != 2*time.Second || !st.Throttling {
		t.Fatalf("Supervisor.Status: queued %d, throttles %d for %v, throttling %v; want 5 MiB, 3 for 2s, true",
			st.QueuedBytes, st.Counts.Throttles, st.Counts.Throttled, st.Throttling)
	}
}
