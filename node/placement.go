package node

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicmq/quicmq/federation"
	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/routing"
)

// placement decides which node of this region holds each topic's log (invariant I6).
//
// A topic whose log exists on a node is owned by that node, for good: a node joining never
// moves it. Every node learns the others' topics from the catalog stream of its link to each
// of them (federation.Config.OnCatalog). A topic no node holds yet is placed by rendezvous
// hashing over the region's members that have not left, failed ones included: a failed
// owner's topics are unavailable until it returns, never re-created elsewhere. Two logs of
// one topic (possible only when nodes disagreed on membership, e.g. during a partition) are a
// conflict: counted in a metric, logged, never merged; every node then routes the topic to
// the same holder (rendezvous among the holders), and the other log is left untouched.
//
// The catalogs are filled by link goroutines and read by every session: all state is under
// mu.
type placement struct {
	n *Node

	// wait bounds how long a request for a topic no node is known to hold waits for the
	// catalogs of the region's live nodes to arrive (after a start or a reconnect).
	wait time.Duration

	conflictGauge prometheus.Gauge
	relayedSubs   prometheus.Counter // subscriptions relayed to another node of the region
	relayedPubs   prometheus.Counter // publishes relayed to another node of the region

	mu struct {
		sync.Mutex
		catalogs  map[string]map[string]struct{} // node -> topics it holds (kept while it is down)
		synced    map[string]bool                // node -> catalog complete since its link came up
		conflicts map[string][]string            // topic -> its holders, when more than one
		changed   chan struct{}                  // closed and replaced on every change
	}
}

func newPlacement(n *Node) *placement {
	p := &placement{n: n, wait: 5 * time.Second}
	p.mu.catalogs = make(map[string]map[string]struct{})
	p.mu.synced = make(map[string]bool)
	p.mu.conflicts = make(map[string][]string)
	p.mu.changed = make(chan struct{})
	p.conflictGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "quicmq_placement_conflicts",
		Help: "Topics with a log on more than one node of this region (a partition's conflict: see the node's log).",
	})
	p.relayedSubs = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "quicmq_relay_subscriptions_total",
		Help: "Subscriptions relayed to the node of this region that owns their topics.",
	})
	p.relayedPubs = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "quicmq_relay_publishes_total",
		Help: "Publishes relayed to the node of this region that owns their topic (acknowledged by it).",
	})
	n.reg.MustRegister(p.conflictGauge, p.relayedSubs, p.relayedPubs)
	return p
}

// notifyLocked wakes everyone waiting for a placement change. Callers hold mu.
func (p *placement) notifyLocked() {
	close(p.mu.changed)
	p.mu.changed = make(chan struct{})
}

// membersChanged is called on every gossip event.
func (p *placement) membersChanged() {
	p.mu.Lock()
	p.notifyLocked()
	p.mu.Unlock()
	if f := p.n.fed; f != nil {
		f.Resync()
	}
}

// onCatalog records that peer holds topic (a federation callback: must not block).
func (p *placement) onCatalog(peer federation.Peer, topic string) {
	if peer.Region != p.n.cfg.Region {
		return
	}
	p.mu.Lock()
	c := p.mu.catalogs[peer.Name]
	if c == nil {
		c = make(map[string]struct{})
		p.mu.catalogs[peer.Name] = c
	}
	_, known := c[topic]
	c[topic] = struct{}{}
	if !known {
		p.checkConflictLocked(topic)
		p.notifyLocked()
	}
	p.mu.Unlock()
}

// onCatalogSynced records that peer announced every topic it held (a federation callback).
func (p *placement) onCatalogSynced(peer federation.Peer) {
	if peer.Region != p.n.cfg.Region {
		return
	}
	p.mu.Lock()
	p.mu.synced[peer.Name] = true
	p.notifyLocked()
	p.mu.Unlock()
	p.n.fed.Resync() // topics this node should now mirror
}

// localTopicCreated is called by the topic watcher for each new local log.
func (p *placement) localTopicCreated(topic string) {
	p.mu.Lock()
	p.checkConflictLocked(topic)
	p.mu.Unlock()
}

// holdersLocked lists the nodes known to hold topic's log, this one included.
func (p *placement) holdersLocked(topic string) []string {
	var out []string
	if _, _, ok := p.n.wal.Bounds(topic); ok {
		out = append(out, p.n.cfg.Name)
	}
	for name, c := range p.mu.catalogs {
		if _, ok := c[topic]; ok && name != p.n.cfg.Name {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func (p *placement) checkConflictLocked(topic string) {
	if p.n.cfg.Replicas > 1 {
		return // replicated topics have several holders by design, placed once by raft
	}
	holders := p.holdersLocked(topic)
	if len(holders) < 2 {
		return
	}
	if prev := p.mu.conflicts[topic]; slices.Equal(prev, holders) {
		return
	}
	p.mu.conflicts[topic] = holders
	p.conflictGauge.Set(float64(len(p.mu.conflicts)))
	p.n.log.Error("placement conflict: more than one node of the region holds a log of this topic; "+
		"nothing is merged: every node routes the topic to one of them, the others' records stay where they are until an operator decides",
		"topic", topic, "holders", holders, "serving", routing.Owner(topic, holders))
}

// Conflicts returns the topics with a log on more than one node of this region, with their
// holders.
func (n *Node) Conflicts() map[string][]string {
	if n.place == nil {
		return nil
	}
	n.place.mu.Lock()
	defer n.place.mu.Unlock()
	out := make(map[string][]string, len(n.place.mu.conflicts))
	for t, h := range n.place.mu.conflicts {
		out[t] = slices.Clone(h)
	}
	return out
}

// regionMember is a node of this region as placement sees it.
type regionMember struct {
	name   string
	status gossip.Status
}

// members lists this region's nodes that have not left (this node included, whatever
// gossip says of it).
func (p *placement) members() []regionMember {
	out := []regionMember{{name: p.n.cfg.Name, status: gossip.StatusAlive}}
	for _, m := range p.n.gossip.RegionMembers(p.n.cfg.Region) {
		if m.Name == p.n.cfg.Name || m.Status == gossip.StatusLeft || m.Status == gossip.StatusLeaving {
			continue
		}
		out = append(out, regionMember{name: m.Name, status: m.Status})
	}
	return out
}

// memberStatus is the gossip status of the region's node name (StatusLeft when unknown).
func (p *placement) memberStatus(name string) gossip.Status {
	if name == p.n.cfg.Name {
		return gossip.StatusAlive
	}
	return p.n.gossip.MemberStatus(p.n.cfg.Region, name)
}

// ownerNow decides topic's owner from what is known now. ready is false when a live node's
// catalog has not arrived yet, so that a topic it may hold cannot be ruled out; changed is
// closed at the next change.
func (p *placement) ownerNow(topic string) (owner string, ready bool, changed <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	changed = p.mu.changed
	if holders := p.holdersLocked(topic); len(holders) > 0 {
		return routing.Owner(topic, holders), true, changed
	}
	ms := p.members()
	names := make([]string, 0, len(ms))
	ready = true
	for _, m := range ms {
		names = append(names, m.name)
		if m.name != p.n.cfg.Name && m.status == gossip.StatusAlive && !p.mu.synced[m.name] {
			ready = false
		}
	}
	return routing.Owner(topic, names), ready, changed
}

// owner decides topic's owner, waiting (up to wait, or ctx) for the catalogs of live nodes
// when no node is known to hold it. A non-nil error says why the topic cannot be served now;
// it names the owner when the owner is the problem.
func (p *placement) owner(ctx context.Context, topic string) (string, *wire.Error) {
	timeout := time.NewTimer(p.wait)
	defer timeout.Stop()
	for {
		owner, ready, changed := p.ownerNow(topic)
		if ready {
			return owner, p.available(owner, topic)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return "", wire.Errorf(wire.CodeUnavailable, "topic %q: %v", topic, ctx.Err())
		case <-timeout.C:
			return "", wire.Errorf(wire.CodeUnavailable,
				"topic %q: the catalogs of this region's nodes have not all arrived within %v, so its owner is not known yet; retry", topic, p.wait)
		}
	}
}

// waitCatalogs waits (up to wait, or ctx) until the catalog of every live node of the region
// has arrived, so that a subscription spanning the region finds every node's topics.
func (p *placement) waitCatalogs(ctx context.Context) *wire.Error {
	timeout := time.NewTimer(p.wait)
	defer timeout.Stop()
	for {
		_, ready, changed := p.ownerNow("")
		if ready {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return wire.Errorf(wire.CodeUnavailable, "waiting for the region's catalogs: %v", ctx.Err())
		case <-timeout.C:
			return wire.Errorf(wire.CodeUnavailable,
				"the catalogs of this region's nodes have not all arrived within %v (a node just started or its link is down); retry", p.wait)
		}
	}
}

// available says why owner cannot serve topic now, or nil.
func (p *placement) available(owner, topic string) *wire.Error {
	if owner == p.n.cfg.Name {
		return nil
	}
	switch st := p.memberStatus(owner); st {
	case gossip.StatusAlive:
		if p.n.fed.Connected(owner) {
			return nil
		}
		return wire.Errorf(wire.CodeUnavailable,
			"topic %q is owned by node %q of region %q, which this node cannot reach (link down); retry when it is back",
			topic, owner, p.n.cfg.Region)
	default:
		what := "has failed (gossip lost contact with it)"
		if st == gossip.StatusLeft || st == gossip.StatusLeaving {
			what = "has left the region"
		}
		return wire.Errorf(wire.CodeUnavailable,
			"topic %q is owned by node %q of region %q, which %s: the topic is unavailable until that node returns (its log stays there)",
			topic, owner, p.n.cfg.Region, what)
	}
}

// shouldMirror tells the federation whether this node mirrors topic for its region: only
// the topic's owner does, and only once placement is sure.
func (p *placement) shouldMirror(topic string) bool {
	if r := p.n.rep; r != nil { // the leader of a replicated topic's group mirrors it
		return r.shouldMirror(topic)
	}
	owner, ready, _ := p.ownerNow(topic)
	return ready && owner == p.n.cfg.Name
}

// servedElsewhere reports whether topic's log here is a conflict's copy that another holder
// serves.
func (p *placement) servedElsewhere(topic string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, ok := p.mu.conflicts[topic]
	return ok && routing.Owner(topic, h) != p.n.cfg.Name
}

// holders lists the nodes known to hold topic's log, this one included (a copy).
func (p *placement) holders(topic string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.holdersLocked(topic)
}

// changedCh is closed at the next placement change.
func (p *placement) changedCh() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.changed
}

// holdsMatching reports whether node name is known to hold a topic matching pattern.
func (p *placement) holdsMatching(name, pattern string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for t := range p.mu.catalogs[name] {
		if routing.Match(pattern, t) {
			return t, true
		}
	}
	return "", false
}
