package node

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/routing"
)

// newWideRegion is region eu of four nodes with Replicas 3: the fourth joins the metadata
// group as a learner, and topics spread over all four.
func newWideRegion(t *testing.T) *regionMesh {
	t.Helper()
	return newRegionMesh(t, []string{"eu"}, 4, func(c *Config) {
		c.Replicas = 3
		c.Raft = TestRaftSettings()
	})
}

// TestReplicatedGroupThroughOutsideNodeFollowsLeader: in a region larger than --replicas, a
// group member connected to a node that holds no replica of the group's topic is served by
// the topic's leader, which that node learns from a replica. When the leader is lost, the
// member (a Conn with Reconnect) is told to subscribe again and reaches the new leader
// through the same node: it goes on after its last confirmed record, nothing confirmed comes
// again, and the unconfirmed rest and what is published after the failover arrive. A node
// that kept sending it to a replica that does not lead (told "moved" again and again) would
// not get the records within the deadline.
func TestReplicatedGroupThroughOutsideNodeFollowsLeader(t *testing.T) {
	m := newWideRegion(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	// A topic whose replicas leave one node out: that node is the member's way in.
	var topic, via string
	var replicas []string
	lc := m.dial("eu-1")
	defer lc.Close()
	for i := 0; via == ""; i++ {
		if i == 20 {
			t.Fatal("20 topics, each placed on all four nodes")
		}
		tp := fmt.Sprintf("outg.t%d", i)
		publishRetrying(ctx, t, lc, tp, 0, 20)
		list, err := lc.Topics(ctx, tp)
		if err != nil || len(list) != 1 || len(list[0].Replicas) != 3 {
			t.Fatalf("%s: %+v, %v", tp, list, err)
		}
		for _, name := range m.names {
			if !slices.Contains(list[0].Replicas, name) {
				topic, via, replicas = tp, name, list[0].Replicas
			}
		}
	}
	var lead string
	testlog.WaitFor(t, 10*time.Second, "a leader of "+topic, func() bool {
		lead = leaderOf(m.nodes[replicas[0]], topic)
		return lead != ""
	})
	t.Logf("%s on %v, led by %s; the member comes through %s", topic, replicas, lead, via)

	c := dialNode(t, m.nodes[via], client.Options{Reconnect: true})
	defer c.Close()
	sub, err := c.Subscribe(ctx, topic, client.SubscribeOptions{Group: "outside"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for i := range 10 {
		rec, err := sub.Next(ctx)
		if err != nil || rec.Offset != uint64(i) {
			t.Fatalf("record %d through %s: %+v, %v", i, via, rec, err)
		}
		if err := sub.Ack(rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := sub.Commit(ctx); err != nil {
		t.Fatalf("commit through %s: %v", via, err)
	}

	m.nodes[lead].Close()
	start := time.Now()
	var survivor string
	for _, name := range replicas {
		if name != lead && survivor == "" {
			survivor = name
		}
	}
	pc := m.dial(survivor)
	defer pc.Close()
	publishRetrying(ctx, t, pc, topic, 20, 30) // only the new leader can have these
	seen := map[uint64]int{}
	again := 0
	for len(seen) < 20 {
		rec, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("after the leader %s was lost, through %s (%d of 10..29 so far): %v", lead, via, len(seen), err)
		}
		if rec.Offset < 10 {
			t.Fatalf("record %d, confirmed before the leader %s was lost, was delivered again", rec.Offset, lead)
		}
		if seen[rec.Offset]++; seen[rec.Offset] > 1 {
			again++ // unconfirmed when the leader went: delivered again, as it may be
		}
		if err := sub.Ack(rec); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("10..29 through %s %v after the leader %s was closed (%d unconfirmed ones delivered again)",
		via, time.Since(start).Round(time.Millisecond), lead, again)
}

// TestListingNamesTopicBeforeItsCatalogs: a node that holds no replica of a topic lists it
// from the replicas, once, with no catalog telling it who holds the topic (a replicated
// region's nodes keep none of each other since NoLocalCatalog; before, a topic just created
// had none yet). The catalogs' owner of such a topic is then computed over all the region's
// nodes, and when the topic was placed while this node was down, that owner can be this
// very node: a listing that kept only the owner's row would leave the topic out.
func TestListingNamesTopicBeforeItsCatalogs(t *testing.T) {
	m := newWideRegion(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const via = "eu-4"
	m.nodes[via].Close()
	testlog.WaitFor(t, 10*time.Second, via+" seen down by the others", func() bool {
		for _, name := range m.names {
			if name != via && m.nodes[name].place.MemberStatus(via) == gossip.StatusAlive {
				return false
			}
		}
		return true
	})

	// A topic placed without via that via would own over all four nodes.
	lc := m.dial("eu-1")
	defer lc.Close()
	var topic string
	var replicas []string
	for i := 0; topic == ""; i++ {
		if i == 40 {
			t.Fatalf("in 40 topics, %s never won the owner over all four nodes", via)
		}
		tp := fmt.Sprintf("lst.t%d", i)
		if routing.Owner(tp, m.names) != via {
			continue
		}
		publishRetrying(ctx, t, lc, tp, 0, 1)
		var rt *repTopic
		testlog.WaitFor(t, 10*time.Second, "the placement of "+tp+" on eu-1", func() bool {
			rt = m.nodes["eu-1"].rep.lookup(tp)
			return rt != nil
		})
		if slices.Contains(rt.names(), via) {
			t.Fatalf("%s, published while %s was down, placed on %v", tp, via, rt)
		}
		topic, replicas = tp, rt.names()
	}
	lc.Close()

	m.restart(via)

	c := m.dial(via)
	defer c.Close()
	list, err := c.Topics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || !slices.Equal(list[0].Replicas, replicas) {
		t.Fatalf("%s listed through %s, with no catalog naming it: %+v; want one row on %v", topic, via, list, replicas)
	}
	// A replicated region's nodes keep no catalog of each other (federation's
	// NoLocalCatalog), so what the listing did without is the rule, not a moment.
	if h := m.nodes[via].place.Holders(topic); len(h) > 0 {
		t.Fatalf("%s holds a catalog of %s naming %v: a replicated region's nodes keep none of each other", via, topic, h)
	}
}
