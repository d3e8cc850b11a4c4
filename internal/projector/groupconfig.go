package projector

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// setGroupSession makes -session-timeout mean the same under KIP-848 as
// under the classic protocol. A KIP-848 member does not choose its session
// timeout: the broker's group.consumer.session.timeout.ms (45 s by
// default) applies, unless the group has its own consumer.session.timeout.ms
// (a group config, Kafka 4.0+, settable before the group exists). This sets
// that, and the heartbeat interval to a sixth of it as the classic
// protocol's client does. The broker checks both against its
// group.consumer.min/max.* bounds (by default a session of 45 s to 60 s and
// heartbeats of 5 s to 15 s); what it refuses, or a missing ALTER_CONFIGS
// permission on the group, is returned for the caller to log: the group
// then runs with the broker's settings.
func setGroupSession(ctx context.Context, cl *kgo.Client, group string, session time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = group
	for name, v := range map[string]time.Duration{
		"consumer.session.timeout.ms":    session,
		"consumer.heartbeat.interval.ms": session / 6,
	} {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Op = name, kmsg.IncrementalAlterConfigOpSet
		c.Value = kmsg.StringPtr(strconv.FormatInt(v.Milliseconds(), 10))
		res.Configs = append(res.Configs, c)
	}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("setting the session timeout of group %s: %w", group, err)
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			msg := ""
			if r.ErrorMessage != nil {
				msg = ": " + *r.ErrorMessage
			}
			return fmt.Errorf("setting the session timeout of group %s to %v: %w%s", group, session, err, msg)
		}
	}
	return nil
}
