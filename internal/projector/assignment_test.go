package projector

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/testenv"
)

// TestAssignmentBothProtocols: the gateway finds a run's owner through
// Assignment, whichever group protocol the projectors speak. Apache Kafka
// does not describe a KIP-848 group through the classic DescribeGroups
// (it answers GROUP_ID_NOT_FOUND); Assignment then asks with
// ConsumerGroupDescribe. Two instances split the partitions, and each
// partition's owner carries its advertised address; a group that does not
// exist has no owners.
//
// KIP-848 runs on Apache Kafka only: kfake's ConsumerGroupDescribe names
// the assigned topics by id alone (the protocol has their names too), so
// no client can read a KIP-848 assignment from it by topic name
// (docs/ARCHITECTURE.md, "Brokers").
func TestAssignmentBothProtocols(t *testing.T) {
	brokertest.Run(t, func(t *testing.T, b *brokertest.Broker) {
		for _, protocol := range []string{GroupProtocolClassic, GroupProtocolConsumer} {
			if protocol == GroupProtocolConsumer && b.Kind == brokertest.Kfake {
				continue
			}
			t.Run(protocol, func(t *testing.T) {
				const partitions = 4
				e := newEnvOn(t, b, partitions)
				addrs := map[string]bool{}
				var ps []*Projector
				for _, addr := range []string{"a.test:1", "b.test:2"} {
					cfg := e.config(t.TempDir())
					cfg.GroupProtocol, cfg.AdvertiseAddr = protocol, addr
					p, _ := e.start(cfg)
					ps = append(ps, p)
					addrs[addr] = true
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				adm := kadm.NewClient(e.client)
				var assign map[int32]cluster.Member
				var g cluster.Group
				t.Cleanup(func() {
					if t.Failed() {
						t.Logf("last seen: group %+v, assignment %v, owned %v and %v", g, assign, ps[0].Owned(), ps[1].Owned())
					}
				})
				testenv.WaitFor(t, 30*time.Second, until(nil, "both instances to own partitions, as the coordinator says", func() bool {
					var err error
					if g, err = cluster.DescribeGroup(ctx, adm, e.group, e.names); err != nil {
						t.Logf("DescribeGroup: %v", err)
						return false
					}
					assign, err = cluster.Assignment(ctx, adm, e.group, e.names)
					return err == nil && len(assign) == partitions && len(g.Members) == 2 && g.State == "Stable" &&
						len(ps[0].Owned()) > 0 && len(ps[1].Owned()) > 0
				}))
				if g.Protocol != protocol {
					t.Errorf("DescribeGroup says protocol %q, want %q", g.Protocol, protocol)
				}
				seen := map[string]bool{}
				for part, m := range assign {
					if !addrs[m.Addr] || m.ClientID != "canopy-projector" {
						t.Errorf("partition %d: owner %+v", part, m)
					}
					seen[m.Addr] = true
				}
				if len(seen) != 2 {
					t.Errorf("owners %v, want both instances", seen)
				}
				none, err := cluster.Assignment(ctx, adm, e.group+"-none", e.names)
				if err != nil || len(none) != 0 {
					t.Errorf("Assignment of a group that does not exist = %v, %v; want no owners", none, err)
				}
			})
		}
	})
}
