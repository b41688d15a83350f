package node

import (
	"context"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/subscriptions"
)

// The node as its subscriptions see it (node/subscriptions.Host): made once at the end of
// New, when the log, the tails, placement, the links and the replicated path all exist.

// newRegion picks, once, where the node's region keeps its topics: single copies placed by
// gossip, or replicated topics in raft groups. The subscriptions and the node's own
// questions of the same kind (groupHome, topicHolders, ...) go through n.topics and never
// ask which they have.
func (n *Node) newRegion() subscriptions.Region {
	if n.rep != nil {
		return replicatedRegion{n.rep}
	}
	return subscriptions.SingleCopy{Place: n.place, Name: n.cfg.Name, Region: n.cfg.Region}
}

// newSubHost makes the subscriptions' view of the node.
func (n *Node) newSubHost() *subscriptions.Host {
	return subscriptions.NewHost(subscriptions.HostConfig{
		Name: n.cfg.Name, Region: n.cfg.Region, ReadAhead: n.cfg.ReadAhead, Limits: n.limits,
		Log: n.log, WAL: n.wal, Tails: n.tails, Place: n.place, Fed: n.fed, Topics: n.topics,
		Metrics: n.metrics.sub, Interest: n.interest, Wild: n.wild,
	})
}

// liveSubscriptions are the subscriptions being served (not group members).
func (n *Node) liveSubscriptions() []*subscriptions.Subscription {
	if n.subs == nil {
		return nil // New failed before it made them; a scrape may still come
	}
	return n.subs.Live()
}

// replicatedRegion is the replicated topics as subscriptions.Region.
type replicatedRegion struct{ r *replicated }

func (a replicatedRegion) Owner(ctx context.Context, topic string, durable bool) (string, *wire.Error) {
	return a.r.subscribeOwner(ctx, topic, durable) // replroute.go
}

// Moved: a durable consumer of a replicated topic follows its leader; any replica serves a
// plain subscription.
func (a replicatedRegion) Moved(topic, owner string, durable bool) *wire.Error {
	if !durable {
		return nil
	}
	if now := a.r.leaderName(topic); now != "" && now != owner {
		return wire.Errorf(wire.CodeUnavailable, "topic %q of region %q is now led by node %q, no longer by %q: subscribe again",
			topic, a.r.n.cfg.Region, now, owner)
	}
	return nil
}
func (a replicatedRegion) Spread() bool                   { return a.r.wide() }
func (a replicatedRegion) IsReplicated(topic string) bool { return a.r.isReplicated(topic) }
func (a replicatedRegion) PositionBarrier(ctx context.Context, durable, topic string) *wire.Error {
	if !a.r.isReplicated(topic) {
		return nil // a topic of this node's own log
	}
	return a.r.positionBarrier(ctx, durable, topic) // replpos.go
}
func (a replicatedRegion) SetPosition(ctx context.Context, durable, topic string, off uint64, vec map[string]uint64) *wire.Error {
	return a.r.setPosition(ctx, durable, topic, off, vec) // replpropose.go
}
