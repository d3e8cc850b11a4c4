package projector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/pkg/projection"
)

// The size of what a projector writes. Every record it produces must fit
// the topic it goes to: a record the producer or the broker refuses fails
// its commit, and would fail it again every time (poison.go). So the
// projector reads each topic's max.message.bytes at start, caps its
// producers' batches at it (franz-go's own default, 1,000,012 bytes, is
// neither Kafka's default nor a topic's own, so raising a topic's limit
// would not otherwise help), and refuses to start when a wake of the
// largest size the projection builds (projection.Config.MaxWakeBytes)
// would not fit the wake topics.

// ErrRecordLimits is returned by New when a topic takes records smaller
// than the projector may write to it: no restart can fix that.
var ErrRecordLimits = errors.New("projector: a topic's max.message.bytes is smaller than what the projector writes to it")

// wakeRecordOverhead bounds what a wake's record adds to its value: its key
// (a run id: up to 256 code points of up to 4 bytes each), its headers
// (content type, schema version, traceparent and up to 512 bytes of
// tracestate) and the record's and its batch's framing.
const wakeRecordOverhead = 4 << 10

// defaultRecordLimit is the limit of a topic whose limit is not known:
// franz-go's default producer batch size.
const defaultRecordLimit = 1_000_012

// maxBatchLimit caps the producers' batch size whatever a topic allows:
// franz-go refuses a batch size over its request size (100 MiB).
const maxBatchLimit = 64 << 20

// recordFraming and headerFraming bound the bytes a record batch of one
// record adds to the record's key, value and headers: the batch header (61
// bytes) and the record's varints, and each header's two lengths.
const recordFraming, headerFraming = 61 + 5*binaryMaxVarintLen32, 2 * binaryMaxVarintLen32

const binaryMaxVarintLen32 = 5

// recordSize is the most bytes a record takes in a batch of its own.
func recordSize(key, value []byte, headers []kgo.RecordHeader) int {
	n := len(key) + len(value) + recordFraming
	for _, h := range headers {
		n += len(h.Key) + len(h.Value) + headerFraming
	}
	return n
}

// recordLimit is the largest record batch topic takes.
func (p *Projector) recordLimit(topic string) int {
	if n, ok := p.limits[topic]; ok {
		return n
	}
	return defaultRecordLimit
}

// batchLimit is the producers' batch size for topic
// (kgo.ProducerBatchMaxBytesFn): the topic's own limit, and for the wake
// topics and the changelog no more than their largest record takes
// (checkRecordLimits: -max-wake-bytes and its record's overhead, and
// projection.MaxRecordBytes). A produce request carries a batch for each
// partition it writes, and franz-go builds it in one buffer that grows by
// appending from 1 KiB; the collector empties the client's pool of them at
// every cycle, so under pressure each commit grew its buffers again, to
// the topics' whole limit: the largest allocation of the bench's priority
// scenario (18% of its bytes; 10% with these batches). Smaller requests
// also queue less in front of a human input's at the broker.
func (p *Projector) batchLimit(topic string) int32 {
	n := min(p.recordLimit(topic), maxBatchLimit)
	switch names := p.cfg.Names; topic {
	case names.Wakes(), names.PriorityWakes():
		n = min(n, p.cfg.Projection.MaxWakeBytes+wakeRecordOverhead)
	case names.Changelog():
		n = min(n, projection.MaxRecordBytes+recordFraming)
	}
	return int32(n)
}

// checkRecordLimits reads the limits of the topics the projector writes
// and checks that a wake of the largest size the projection builds fits
// both wake topics, and the largest state record the changelog.
func (p *Projector) checkRecordLimits(ctx context.Context, adm *kadm.Client) error {
	names := p.cfg.Names
	written := []string{names.Wakes(), names.PriorityWakes(), names.Changelog(), names.DeadLetter(), names.AgentEvents()}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	limits, err := cluster.RecordLimits(ctx, adm, written...)
	for errors.Is(err, kerr.UnknownTopicOrPartition) {
		// Apache Kafka's brokers learn of a topic a moment after its
		// creation is acknowledged: one created just before this start
		// (the dead-letter topic is not among those CreateTopics waits
		// for) may not be described yet.
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("projector: reading the topics' record limits: %w", err)
		case <-t.C:
		}
		limits, err = cluster.RecordLimits(ctx, adm, written...)
	}
	if err != nil {
		return fmt.Errorf("projector: reading the topics' record limits: %w", err)
	}
	p.limits = limits
	need := p.cfg.Projection.MaxWakeBytes + wakeRecordOverhead
	var bad []string
	for _, t := range written[:2] {
		if limits[t] < need {
			bad = append(bad, fmt.Sprintf("%s takes %d", t, limits[t]))
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return fmt.Errorf("%w: a wake is up to %d bytes (-max-wake-bytes) and its record up to %d more, but %s: raise the topics' max.message.bytes to %d or more (kafka-configs --alter --add-config max.message.bytes=%d), or lower -max-wake-bytes",
			ErrRecordLimits, p.cfg.Projection.MaxWakeBytes, wakeRecordOverhead, strings.Join(bad, ", "), need, need)
	}
	// A state change's key and value are at most projection.MaxRecordBytes.
	if cl, need := names.Changelog(), projection.MaxRecordBytes+recordFraming; limits[cl] < need {
		return fmt.Errorf("%w: a changelog record is up to %d bytes, but %s takes %d: raise its max.message.bytes to %d or more",
			ErrRecordLimits, need, cl, limits[cl], need)
	}
	p.log.Info("topic record limits read", "wakes", limits[names.Wakes()], "priority_wakes", limits[names.PriorityWakes()],
		"changelog", limits[names.Changelog()], "dead_letter", limits[names.DeadLetter()], "max_wake_bytes", p.cfg.Projection.MaxWakeBytes)
	return nil
}
