package projector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// advertiseSep separates the client id from the advertised address in a
// member's client id: the classic group protocol has no field of its own for
// where a member answers, and the client id is free text every broker shows
// in DescribeGroups.
const advertiseSep = "@"

// ErrNoOwner is returned by Owner when no member of the group owns a run's
// partition now (the group is rebalancing, or no projector is up).
var ErrNoOwner = errors.New("projector: no instance owns the run's partition")

// Member is one projector instance of the group, as the group coordinator
// describes it.
type Member struct {
	// MemberID is the id the coordinator gave the member.
	MemberID string
	// InstanceID is its static instance id, if it has one.
	InstanceID string
	// ClientID is its Kafka client id, without the advertised address.
	ClientID string
	// Host is the address the broker sees it connect from.
	Host string
	// Addr is the host:port it advertises (Config.AdvertiseAddr), if any.
	Addr string
	// Partitions are the agent events partitions assigned to it, in order.
	Partitions []int32
}

// Assignment reads the projector group's current assignment from the group
// coordinator: the member that owns each partition. Any client of the
// cluster can ask: the gateway uses it to send a query about a run to the
// instance that holds the run. A partition just assigned may still be
// restoring on its new owner (Projector.Owned says which are served).
func Assignment(ctx context.Context, adm *kadm.Client, group string, names topics.Names) (map[int32]Member, error) {
	groups, err := adm.DescribeGroups(ctx, group)
	if err == nil {
		err = groups.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("projector: describing group %s: %w", group, err)
	}
	out := make(map[int32]Member)
	for _, g := range groups {
		for _, m := range g.Members {
			c, ok := m.Assigned.AsConsumer()
			if !ok {
				continue
			}
			mem := Member{MemberID: m.MemberID, ClientID: m.ClientID, Host: strings.TrimPrefix(m.ClientHost, "/")}
			if m.InstanceID != nil {
				mem.InstanceID = *m.InstanceID
			}
			if i := strings.LastIndex(m.ClientID, advertiseSep); i >= 0 {
				mem.ClientID, mem.Addr = m.ClientID[:i], m.ClientID[i+len(advertiseSep):]
			}
			for _, t := range c.Topics {
				if t.Topic == names.AgentEvents() {
					mem.Partitions = append(mem.Partitions, t.Partitions...)
				}
			}
			slices.Sort(mem.Partitions)
			for _, part := range mem.Partitions {
				out[part] = mem
			}
		}
	}
	return out, nil
}

// Owner returns the member that owns run's partition in an assignment.
func Owner(assignment map[int32]Member, run string, partitions int32) (Member, int32, error) {
	part := topics.Partition([]byte(run), partitions)
	m, ok := assignment[part]
	if !ok {
		return Member{}, part, fmt.Errorf("%w: partition %d of run %q", ErrNoOwner, part, run)
	}
	return m, part, nil
}
