package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// The consumer group protocols a projector group may speak.
const (
	GroupProtocolClassic  = "classic"  // JoinGroup/SyncGroup, client-side cooperative-sticky
	GroupProtocolConsumer = "consumer" // KIP-848, broker-side assignment
)

// AdvertiseSep separates the client id from the advertised address in a
// member's client id: the classic group protocol has no field of its own for
// where a member answers, and the client id is free text every broker shows
// in DescribeGroups.
const AdvertiseSep = "@"

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
//
// It speaks both group protocols: the classic DescribeGroups, and for a
// KIP-848 group (GroupProtocolConsumer), which Apache Kafka does not
// describe through that API (GROUP_ID_NOT_FOUND), ConsumerGroupDescribe. A
// group that exists under neither has no owners: an empty assignment.
func Assignment(ctx context.Context, adm *kadm.Client, group string, names topics.Names) (map[int32]Member, error) {
	g, err := DescribeGroup(ctx, adm, group, names)
	if err != nil {
		return nil, err
	}
	out := make(map[int32]Member)
	for _, m := range g.Members {
		for _, part := range m.Partitions {
			out[part] = m
		}
	}
	return out, nil
}

// Group is a consumer group as its coordinator describes it, in either
// protocol.
type Group struct {
	// Protocol is GroupProtocolClassic or GroupProtocolConsumer; empty for
	// a group that does not exist.
	Protocol string
	// State is the coordinator's: Stable once no rebalance is under way (in
	// both protocols); Dead or Empty for a group without members.
	State string
	// Members, each with the agent events partitions assigned to it.
	Members []Member
}

// DescribeGroup describes the projector group group, of the topics names,
// in whichever protocol it uses (see Assignment).
func DescribeGroup(ctx context.Context, adm *kadm.Client, group string, names topics.Names) (Group, error) {
	groups, err := adm.DescribeGroups(ctx, group)
	if err == nil {
		err = groups.Error()
	}
	if errors.Is(err, kerr.GroupIDNotFound) {
		return describeConsumerGroup(ctx, adm, group, names)
	}
	if err != nil {
		return Group{}, fmt.Errorf("projector: describing group %s: %w", group, err)
	}
	g := groups[group]
	if len(g.Members) == 0 {
		// kfake describes a KIP-848 group through DescribeGroups too, as
		// Stable without members, where KIP-848 and Apache Kafka answer
		// GROUP_ID_NOT_FOUND (docs/ARCHITECTURE.md, "Brokers"): ask the
		// other way.
		if cg, err := describeConsumerGroup(ctx, adm, group, names); err == nil && len(cg.Members) > 0 {
			return cg, nil
		}
	}
	out := Group{Protocol: GroupProtocolClassic, State: g.State}
	if g.State == "Dead" {
		out.Protocol = ""
	}
	for _, m := range g.Members {
		mem := member(m.MemberID, m.ClientID, m.ClientHost, m.InstanceID)
		if c, ok := m.Assigned.AsConsumer(); ok {
			for _, t := range c.Topics {
				if t.Topic == names.AgentEvents() {
					mem.Partitions = append(mem.Partitions, t.Partitions...)
				}
			}
		}
		slices.Sort(mem.Partitions)
		out.Members = append(out.Members, mem)
	}
	return out, nil
}

func describeConsumerGroup(ctx context.Context, adm *kadm.Client, group string, names topics.Names) (Group, error) {
	groups, err := adm.DescribeConsumerGroups(ctx, group)
	if err == nil {
		err = groups.Error()
	}
	if errors.Is(err, kerr.GroupIDNotFound) {
		return Group{State: "Dead"}, nil
	}
	if err != nil {
		return Group{}, fmt.Errorf("projector: describing group %s (KIP-848): %w", group, err)
	}
	g := groups[group]
	out := Group{Protocol: GroupProtocolConsumer, State: g.State}
	for _, m := range g.Members {
		mem := member(m.MemberID, m.ClientID, m.ClientHost, m.InstanceID)
		for p := range m.Assignment[names.AgentEvents()] {
			mem.Partitions = append(mem.Partitions, p)
		}
		slices.Sort(mem.Partitions)
		out.Members = append(out.Members, mem)
	}
	return out, nil
}

// member makes a Member of what both protocols say of one: the advertised
// address comes out of the client id.
func member(memberID, clientID, host string, instanceID *string) Member {
	m := Member{MemberID: memberID, ClientID: clientID, Host: strings.TrimPrefix(host, "/")}
	if instanceID != nil {
		m.InstanceID = *instanceID
	}
	if i := strings.LastIndex(clientID, AdvertiseSep); i >= 0 {
		m.ClientID, m.Addr = clientID[:i], clientID[i+len(AdvertiseSep):]
	}
	return m
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
