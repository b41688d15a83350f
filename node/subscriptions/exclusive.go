package subscriptions

import (
	"context"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
)

// Exclusive durables: one active subscriber at a time per durable consumer name (with its
// tenant's namespace), so a durable's records never go to two subscribers at once (Pulsar's
// Exclusive subscription, a JetStream durable with one bound pull/push client).
//
// A subscriber that sets wire.SubscribeStandby waits instead of being refused, and takes
// over when the holder ends (Pulsar's Failover): it is sent nothing, not even SUBSCRIBED,
// until then, so there is never a second copy of the stream.
//
// The lock lives on the durable's home node (node/grouprelay.go: the rendezvous winner of its
// name among the region's live nodes). The node the client is connected to, where the
// subscription's core runs, takes it there with a holder stream when it is not the home
// itself (holder.go), so two clients on two nodes of a region never both hold one durable.
// A topic another node owns is read over an upstream, which takes no lock: the owner sees
// its sibling, not the client. Replication (issue 13) does not change this: the lock is
// liveness, not state.

// LockConfig is what the node's exclusive durable locks need of the node.
type LockConfig struct {
	Node   string // this node's name, the holder's node of a lock taken here
	Region string // this node's region, named in a refusal
	// Timeout bounds the wait for a home's answer to a HOLD that is not a standby's
	// (the node's Config.ManageTimeout).
	Timeout time.Duration
	// Open opens a stream to the node of this region named node (a holder stream). It is
	// called only for a durable whose home is another node.
	Open func(ctx context.Context, node string) (*quic.Stream, error)
	Stop <-chan struct{} // closed when the node shuts down: waiters give up with CodeShuttingDown
}

// Locks is the node's table of the exclusive durables held here (their home), and the way
// it takes one at another home (holder.go). A small struct under its mutex: the
// subscriptions of many sessions, and the holder streams of the region's other nodes, take
// and release entries.
type Locks struct {
	cfg LockConfig
	mu  struct {
		sync.Mutex
		held map[string]durableHolder // by durable name, with its tenant namespace
	}
}

// NewLocks returns an empty table.
func NewLocks(cfg LockConfig) *Locks { return &Locks{cfg: cfg} }

// durableHolder is who holds an exclusive durable.
type durableHolder struct {
	node     string        // the node the holder's client is connected to
	client   string        // the holder's remote address
	since    time.Time     // when its subscription was set up
	released chan struct{} // closed when it lets go: standbys wake
}

// Here takes the lock of durable name (namespaced; shown to the client as shown) on this
// node, its home, for a client (address client) of node. When another subscriber holds it,
// a standby waits until that one ends, or until stop or gone is done (nil, nil: give up
// quietly); any other is refused with CodeConflict naming the durable, the node, the
// holder's address and since when it holds it. The caller calls release when the
// subscription ends.
func (l *Locks) Here(node, client, name, shown string, standby bool, stop, gone <-chan struct{}) (release func(), e *wire.Error) {
	for {
		l.mu.Lock()
		h, held := l.mu.held[name]
		if !held {
			break
		}
		l.mu.Unlock()
		if !standby {
			return nil, wire.Errorf(wire.CodeConflict, "durable consumer %q is held by another subscriber on node %s (region %s) since %s (client %s): one subscriber at a time; close it first, use another name, or subscribe as a standby",
				shown, h.node, l.cfg.Region, h.since.UTC().Format(time.RFC3339), h.client)
		}
		select {
		case <-h.released:
		case <-stop:
			return nil, nil
		case <-gone:
			return nil, nil
		case <-l.cfg.Stop:
			return nil, wire.Errorf(wire.CodeShuttingDown, "node shutting down")
		}
	}
	defer l.mu.Unlock()
	if l.mu.held == nil {
		l.mu.held = make(map[string]durableHolder)
	}
	h := durableHolder{node: node, client: client, since: time.Now(), released: make(chan struct{})}
	l.mu.held[name] = h
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			delete(l.mu.held, name)
			l.mu.Unlock()
			close(h.released)
		})
	}, nil
}
