package node

import (
	"sync"
	"time"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/groups"
)

// Exclusive durables: one active subscriber at a time per durable consumer name (with its
// tenant's namespace), so a durable's records never go to two subscribers at once (Pulsar's
// Exclusive subscription, a JetStream durable with one bound pull/push client).
//
// A subscriber that sets wire.SubscribeStandby waits instead of being refused, and takes
// over when the holder ends (Pulsar's Failover): it is sent nothing, not even SUBSCRIBED,
// until then, so there is never a second copy of the stream.
//
// The lock lives on the durable's home node (grouprelay.go: the rendezvous winner of its name
// among the region's live nodes). The node the client is connected to, where the
// subscription's core runs, takes it there with a holder stream when it is not the home
// itself (holder.go), so two clients on two nodes of a region never both hold one durable.
// A topic another node owns is read over an upstream, which takes no lock: the owner sees
// its sibling, not the client. Replication (issue 13) does not change this: the lock is
// liveness, not state.

// consumers is the node's table of held exclusive durables and live groups. A small struct
// under its mutex: subscriptions of many sessions take and release entries.
type consumers struct {
	mu struct {
		sync.Mutex
		held   map[string]durableHolder // by durable name, with its tenant namespace
		groups map[string]*groups.Group // live groups by name, with its tenant namespace (node/groups)
		// fenced names the groups a reset or removal is working on (manage_groups.go): no
		// member joins them meanwhile. The value says which operation.
		fenced map[string]string
	}
}

// durableHolder is who holds an exclusive durable.
type durableHolder struct {
	node     string        // the node the holder's client is connected to
	client   string        // the holder's remote address
	since    time.Time     // when its subscription was set up
	released chan struct{} // closed when it lets go: standbys wake
}

// lockDurable takes the exclusive lock of durable name (namespaced; shown to the client as
// shown) for session s. When another subscriber holds it, a standby (wire.SubscribeStandby)
// waits until that one ends, or until stop is done (nil, nil: give up quietly); any other is
// refused with CodeConflict naming the durable, the node, the holder's address and since when
// it holds it. The caller calls release when the subscription ends.
func (n *Node) lockDurable(s *session, name, shown string, standby bool, stop <-chan struct{}) (release func(), e *wire.Error) {
	if n.groupNameTaken(name) {
		return nil, wire.Errorf(wire.CodeConflict, "%q is the name of a consumer group: a durable consumer needs a name of its own (subscribe as a member with the group's settings, or use another name)", shown)
	}
	if home := n.consumerHome(name); home != n.cfg.Name {
		return n.lockAt(s, home, name, shown, standby, stop) // holder.go
	}
	return n.lockHere(n.cfg.Name, s.conn.RemoteAddr().String(), name, shown, standby, stop, s.ctx.Done())
}

// lockHere takes the lock of durable name on this node (its home) for a client (address
// client) of node: as lockDurable, with gone done when the asker is gone.
func (n *Node) lockHere(node, client, name, shown string, standby bool, stop, gone <-chan struct{}) (release func(), e *wire.Error) {
	c := &n.cons
	for {
		c.mu.Lock()
		h, held := c.mu.held[name]
		if !held {
			break
		}
		c.mu.Unlock()
		if !standby {
			return nil, wire.Errorf(wire.CodeConflict, "durable consumer %q is held by another subscriber on node %s (region %s) since %s (client %s): one subscriber at a time; close it first, use another name, or subscribe as a standby",
				shown, h.node, n.cfg.Region, h.since.UTC().Format(time.RFC3339), h.client)
		}
		select {
		case <-h.released:
		case <-stop:
			return nil, nil
		case <-gone:
			return nil, nil
		case <-n.stop:
			return nil, wire.Errorf(wire.CodeShuttingDown, "node shutting down")
		}
	}
	defer c.mu.Unlock()
	if c.mu.held == nil {
		c.mu.held = make(map[string]durableHolder)
	}
	h := durableHolder{node: node, client: client, since: time.Now(), released: make(chan struct{})}
	c.mu.held[name] = h
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			delete(c.mu.held, name)
			c.mu.Unlock()
			close(h.released)
		})
	}, nil
}
