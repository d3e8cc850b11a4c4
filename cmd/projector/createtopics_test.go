package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestCreateTopicsTombstoneRetention: create-topics gives the changelog the
// tombstone retention of -changelog-tombstone-retention, or of
// CANOPY_CHANGELOG_TOMBSTONE_RETENTION, a day by default, with segments of
// an hour at most; the broker has them as asked.
func TestCreateTopicsTombstoneRetention(t *testing.T) {
	brokertest.Run(t, testCreateTopicsTombstoneRetention)
}

func testCreateTopicsTombstoneRetention(t *testing.T, b *brokertest.Broker) {
	cl, err := kgo.NewClient(b.Opts()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for _, c := range []struct {
		name, flag, env   string
		deletion, segment string
	}{
		{"default", "", "", "86400000", "3600000"},
		{"flag", "10m", "", "600000", "600000"},
		{"env", "", "90m", "5400000", "3600000"},
		{"flag over env", "3h", "90m", "10800000", "3600000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.env != "" {
				t.Setenv("CANOPY_CHANGELOG_TOMBSTONE_RETENTION", c.env)
			}
			names := topics.Names{Prefix: b.Prefix(t, "ct"), Version: 1}
			args := []string{"-brokers", strings.Join(b.Addrs, ","), "-topic-prefix", names.Prefix, "-partitions", "2", "-replication-factor", "1"}
			if c.flag != "" {
				args = append(args, "-changelog-tombstone-retention", c.flag)
			}
			var stderr strings.Builder
			if code := createTopics(args, &stderr); code != 0 {
				t.Fatalf("create-topics: exit %d: %s", code, stderr.String())
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			rcs, err := adm.DescribeTopicConfigs(ctx, names.Changelog())
			if err != nil {
				t.Fatal(err)
			}
			rc, err := rcs.On(names.Changelog(), nil)
			if err == nil {
				err = rc.Err
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, cfg := range rc.Configs {
				if cfg.Value != nil {
					got[cfg.Key] = *cfg.Value
				}
			}
			if got["delete.retention.ms"] != c.deletion || got["segment.ms"] != c.segment || got["cleanup.policy"] != "compact" {
				t.Errorf("changelog: delete.retention.ms %q, segment.ms %q, cleanup.policy %q; want %s, %s, compact",
					got["delete.retention.ms"], got["segment.ms"], got["cleanup.policy"], c.deletion, c.segment)
			}
		})
	}
	for _, bad := range []string{"0s", "-1h", "soon"} {
		var stderr strings.Builder
		args := []string{"-brokers", strings.Join(b.Addrs, ","), "-topic-prefix", b.Prefix(t, "bad"), "-changelog-tombstone-retention", bad}
		if code := createTopics(args, &stderr); code != 2 || !strings.Contains(stderr.String(), "changelog-tombstone-retention") {
			t.Errorf("-changelog-tombstone-retention %s: exit %d: %s; want 2, naming the flag", bad, code, stderr.String())
		}
	}
}
