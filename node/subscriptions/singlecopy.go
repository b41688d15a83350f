package subscriptions

import (
	"context"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/placement"
)

// SingleCopy is the Region of a node whose topics have one copy each (Config.Replicas 1):
// a topic's log lives on its owner, placed by rendezvous hashing over the region's members
// (I6), and a durable's positions are stored in this node's log. Without gossip (Place
// nil) every topic is this node's.
type SingleCopy struct {
	Place        *placement.Table // nil without gossip
	Name, Region string           // this node's, for the answers and errors
}

var _ Region = SingleCopy{}

// Owner is topic's owner, "" for this node. A topic with no log yet is placed (Place.Owner
// waits for the region's catalogs first).
func (s SingleCopy) Owner(ctx context.Context, topic string, _ bool) (string, *wire.Error) {
	if s.Place == nil {
		return "", nil
	}
	o, e := s.Place.Owner(ctx, topic)
	if e != nil || o == s.Name {
		return "", e
	}
	return o, nil
}

// Moved ends a subscription to a topic another node owns when placement now names another
// owner (the topic had no log yet and the region's membership changed, or two logs were
// found and the other one wins). A failed or restarting owner is no move: its topics wait
// for it.
func (s SingleCopy) Moved(topic, owner string, _ bool) *wire.Error {
	if s.Place == nil {
		return nil
	}
	now, ready, _ := s.Place.OwnerNow(topic)
	if !ready || now == owner {
		return nil
	}
	return wire.Errorf(wire.CodeUnavailable, "topic %q of region %q is now served by node %q, no longer by %q: subscribe again",
		topic, s.Region, now, owner)
}

// Spread is true in a mesh: each topic lives on its owner alone.
func (s SingleCopy) Spread() bool { return s.Place != nil }

// IsReplicated is false: no topic is.
func (SingleCopy) IsReplicated(string) bool { return false }

// PositionBarrier returns at once: positions are read from this node's own log.
func (SingleCopy) PositionBarrier(context.Context, string, string) *wire.Error { return nil }

// SetPosition is never called (IsReplicated is false); it refuses, should it be.
func (s SingleCopy) SetPosition(_ context.Context, durable, topic string, _ uint64, _ map[string]uint64) *wire.Error {
	return wire.Errorf(wire.CodeInternal, "store position of %q on %q: node %q has no replicated topics", durable, topic, s.Name)
}
