package node

import (
	"context"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/subscriptions"
)

// The node as its subscriptions see it (node/subscriptions.Host): made once at the end of
// New, when the log, the tails, placement, the links and the replicated path all exist.

// newSubHost makes the subscriptions' view of the node.
func (n *Node) newSubHost() *subscriptions.Host {
	c := subscriptions.HostConfig{
		Name: n.cfg.Name, Region: n.cfg.Region, ReadAhead: n.cfg.ReadAhead, Limits: n.limits,
		Log: n.log, WAL: n.wal, Tails: n.tails, Place: n.place, Fed: n.fed,
		Metrics: n.metrics.sub, Interest: n.interest, Wild: n.wild,
	}
	if n.rep != nil { // an interface holding a nil *replicated would not be nil
		c.Rep = subsReplicated{n.rep}
	}
	return subscriptions.NewHost(c)
}

// liveSubscriptions are the subscriptions being served (not group members).
func (n *Node) liveSubscriptions() []*subscriptions.Subscription {
	if n.subs == nil {
		return nil // New failed before it made them; a scrape may still come
	}
	return n.subs.Live()
}

// subsReplicated is the replicated path as subscriptions.Replicated.
type subsReplicated struct{ r *replicated }

func (a subsReplicated) SubscribeOwner(ctx context.Context, topic string, durable bool) (string, *wire.Error) {
	return a.r.subscribeOwner(ctx, topic, durable) // replroute.go
}
func (a subsReplicated) IsReplicated(topic string) bool { return a.r.isReplicated(topic) }
func (a subsReplicated) PositionBarrier(ctx context.Context, durable, topic string) *wire.Error {
	return a.r.positionBarrier(ctx, durable, topic) // replpos.go
}
func (a subsReplicated) SetPosition(ctx context.Context, durable, topic string, off uint64, vec map[string]uint64) *wire.Error {
	return a.r.setPosition(ctx, durable, topic, off, vec) // replpropose.go
}
func (a subsReplicated) LeaderName(topic string) string { return a.r.leaderName(topic) }
func (a subsReplicated) Wide() bool                     { return a.r.wide() }
