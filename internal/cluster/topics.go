package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// ErrNotCoPartitioned is returned when the input, changelog and wake topics
// do not all exist with one partition count.
var ErrNotCoPartitioned = errors.New("projector: topics are not co-partitioned")

// errMissingTopics says some of canopy's topics do not exist (yet).
var errMissingTopics = errors.New("missing")

// CreateTopics creates every canopy topic with the given partition count and
// replication factor; topics that exist are left alone. It returns once the
// broker's metadata lists every co-partitioned topic (CheckTopics passes):
// Apache Kafka acknowledges a creation when its controller has it, and its
// brokers learn of it a moment later ("it may take several seconds after
// CreateTopicsResult returns success for all the brokers to become aware
// that the topics have been created", AdminClient's documentation), so a
// projector started at once could otherwise find a topic missing. kfake's
// metadata has it at once.
//
// opts shape the topics' configs (topics.TombstoneRetention).
func CreateTopics(ctx context.Context, adm *kadm.Client, names topics.Names, partitions int32, replication int16, opts ...topics.SpecOption) error {
	if err := createTopics(ctx, adm, names, partitions, replication, opts); err != nil {
		return err
	}
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for {
		// Topics that exist with other partition counts are left alone
		// (the projector refuses them at start, saying what to fix).
		if _, err := CheckTopics(ctx, adm, names); err == nil || !errors.Is(err, errMissingTopics) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("projector: created the topics, but the broker's metadata does not list them all yet: %w", ctx.Err())
		case <-poll.C:
		}
	}
}

func createTopics(ctx context.Context, adm *kadm.Client, names topics.Names, partitions int32, replication int16, opts []topics.SpecOption) error {
	for _, s := range names.Specs(partitions, opts...) {
		cfg := make(map[string]*string, len(s.Configs))
		for k, v := range s.Configs {
			cfg[k] = &v
		}
		resp, err := adm.CreateTopic(ctx, s.Partitions, replication, cfg, s.Name)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("projector: creating topic %s: %w", s.Name, err)
		}
	}
	return nil
}

// CheckTopics verifies that every co-partitioned topic exists and that they
// all have one partition count, which it returns. The error says what to fix.
func CheckTopics(ctx context.Context, adm *kadm.Client, names topics.Names) (int32, error) {
	var want []string
	for _, s := range names.Specs(1) {
		if s.CoPartitioned {
			want = append(want, s.Name)
		}
	}
	td, err := adm.ListTopics(ctx, want...)
	if err != nil {
		return 0, fmt.Errorf("projector: listing topics: %w", err)
	}
	counts := map[string]int32{}
	var missing []string
	for _, name := range want {
		t, ok := td[name]
		if ok && t.Err != nil && kerr.IsRetriable(t.Err) && !errors.Is(t.Err, kerr.UnknownTopicOrPartition) {
			// Passing broker trouble, not a missing topic: Serve retries.
			return 0, fmt.Errorf("projector: topic %s: %w", name, t.Err)
		}
		if !ok || t.Err != nil {
			missing = append(missing, name)
			continue
		}
		counts[name] = int32(len(t.Partitions))
	}
	if len(missing) > 0 {
		return 0, fmt.Errorf("%w: %w %s: create them with the same partition count as the others (projector create-topics -partitions N)",
			ErrNotCoPartitioned, errMissingTopics, strings.Join(missing, ", "))
	}
	n := counts[names.AgentEvents()]
	var bad []string
	for _, name := range want {
		if counts[name] != n {
			bad = append(bad, fmt.Sprintf("%s has %d", name, counts[name]))
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return 0, fmt.Errorf("%w: %s has %d partitions but %s: every run must live in the same partition number of each; give them all %d partitions (add partitions, or recreate the odd ones)",
			ErrNotCoPartitioned, names.AgentEvents(), n, strings.Join(bad, ", "), n)
	}
	return n, nil
}

// TombstoneRetention returns the changelog topic's delete.retention.ms as
// the broker has it: how long compaction keeps the tombstone of a deleted
// key. An operator may have altered it since create-topics.
func TombstoneRetention(ctx context.Context, adm *kadm.Client, names topics.Names) (time.Duration, error) {
	topic := names.Changelog()
	cfgs, err := topicConfig(ctx, adm, "delete.retention.ms", topic)
	if err != nil {
		return 0, err
	}
	ms, err := strconv.ParseInt(cfgs[topic], 10, 64)
	if err != nil || ms < 0 {
		return 0, fmt.Errorf("%s: delete.retention.ms %q is not a count of milliseconds", topic, cfgs[topic])
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// RecordLimits returns each topic's max.message.bytes as the broker has it
// (the topic's own, or the broker's message.max.bytes when the topic sets
// none): the largest record batch it takes. An operator may have altered
// it since create-topics.
func RecordLimits(ctx context.Context, adm *kadm.Client, topicNames ...string) (map[string]int, error) {
	cfgs, err := topicConfig(ctx, adm, "max.message.bytes", topicNames...)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int, len(cfgs))
	for topic, v := range cfgs {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%s: max.message.bytes %q is not a positive count of bytes", topic, v)
		}
		out[topic] = n
	}
	return out, nil
}

// topicConfig returns the value of one config of each topic, as the broker
// describes it (the broker's default where the topic sets none).
func topicConfig(ctx context.Context, adm *kadm.Client, key string, topicNames ...string) (map[string]string, error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topicNames...)
	if err != nil {
		return nil, fmt.Errorf("describing the configs of %s: %w", strings.Join(topicNames, ", "), err)
	}
	out := make(map[string]string, len(topicNames))
	for _, topic := range topicNames {
		rc, err := rcs.On(topic, nil)
		if err == nil {
			err = rc.Err
		}
		if err != nil {
			if rc.ErrMessage != "" {
				err = fmt.Errorf("%w: %s", err, rc.ErrMessage)
			}
			return nil, fmt.Errorf("describing the configs of %s: %w", topic, err)
		}
		for _, c := range rc.Configs {
			if c.Key != key {
				continue
			}
			if c.Value == nil {
				return nil, fmt.Errorf("%s: %s has no value", topic, key)
			}
			out[topic] = *c.Value
		}
		if _, ok := out[topic]; !ok {
			return nil, fmt.Errorf("%s: the broker's answer has no %s", topic, key)
		}
	}
	return out, nil
}
