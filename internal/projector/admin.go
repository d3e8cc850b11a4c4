package projector

import (
	"context"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// ErrNotCoPartitioned is returned when the input, changelog and wake topics
// do not all exist with one partition count (cluster.CheckTopics).
var ErrNotCoPartitioned = cluster.ErrNotCoPartitioned

// checkpointTrust is how old a partition's Pebble checkpoint may be and
// still be resumed from (changelog.Config.MaxCheckpointAge): half the
// changelog's tombstone retention, read from the broker, so that a store
// never resumes past a deletion whose tombstone compaction may have dropped
// since. When the broker does not say, half the default, with a warning.
func checkpointTrust(ctx context.Context, adm *kadm.Client, names topics.Names, log *slog.Logger) time.Duration {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, err := cluster.TombstoneRetention(ctx, adm, names)
	if err != nil {
		trust := topics.DefaultTombstoneRetention / 2
		log.Warn("the changelog's tombstone retention could not be read: a Pebble checkpoint is trusted for half the default; "+
			"if the topic's delete.retention.ms is shorter, a restore may miss deletions",
			"topic", names.Changelog(), "max_checkpoint_age", trust, "err", err)
		return trust
	}
	// At least a nanosecond: a MaxCheckpointAge of 0 would mean the
	// default. A changelog that keeps tombstones no time trusts no
	// checkpoint behind it.
	trust := max(d/2, time.Nanosecond)
	log.Info("changelog tombstone retention read: a Pebble checkpoint older than half of it is restored from scratch",
		"topic", names.Changelog(), "delete_retention", d, "max_checkpoint_age", trust)
	return trust
}
