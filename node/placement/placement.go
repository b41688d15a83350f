package placement

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicmq/quicmq/federation"
	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/routing"
)

// Table is a node's view of where its region's topics are: the catalogs of the other nodes
// and the owner of each topic (the package comment says how it is decided).
//
// The catalogs are filled by link goroutines and read by every session: all state is under
// mu, and Table's methods are the only way to it.
type Table struct {
	cfg Config

	// wait bounds how long a request for a topic no node is known to hold waits for the
	// catalogs of the region's live nodes to arrive (after a start or a reconnect).
	wait time.Duration

	conflictGauge prometheus.Gauge
	RelayedSubs   prometheus.Counter // subscriptions relayed to another node of the region
	RelayedPubs   prometheus.Counter // publishes relayed to another node of the region

	mu struct {
		sync.Mutex
		catalogs  map[string]map[string]struct{} // node -> topics it holds (kept while it is down)
		synced    map[string]bool                // node -> catalog complete since its link came up
		conflicts map[string][]string            // topic -> its holders, when more than one
		changed   chan struct{}                  // closed and replaced on every change
	}
}

// Members is what a Table reads of gossip: the members of a region and the status of one.
type Members interface {
	RegionMembers(region string) []gossip.Member
	MemberStatus(region, name string) gossip.Status
}

// Config is what a Table needs of the node. The functions are called without the Table's
// lock held.
type Config struct {
	Name, Region string
	Replicated   bool // the region's topics are replicated (Replicas > 1): placed by raft
	Log          *slog.Logger
	Gossip       Members // the region's members (a *gossip.Gossip)
	// HasLog reports whether this node holds a log of topic.
	HasLog func(topic string) bool
	// Resync asks the region's links to look again at which topics to mirror;
	// Connected reports whether the link to node name is up.
	Resync    func()
	Connected func(name string) bool
	// MirrorReplicated decides ShouldMirror in a replicated region: the leader of the
	// topic's group mirrors it.
	MirrorReplicated func(topic string) bool
}

// New makes the region's table, its metrics registered on reg.
func New(cfg Config, reg prometheus.Registerer) *Table {
	p := &Table{cfg: cfg, wait: 5 * time.Second}
	p.mu.catalogs = make(map[string]map[string]struct{})
	p.mu.synced = make(map[string]bool)
	p.mu.conflicts = make(map[string][]string)
	p.mu.changed = make(chan struct{})
	p.conflictGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "quicmq_placement_conflicts",
		Help: "Topics with a log on more than one node of this region (a partition's conflict: see the node's log).",
	})
	p.RelayedSubs = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "quicmq_relay_subscriptions_total",
		Help: "Subscriptions relayed to the node of this region that owns their topics.",
	})
	p.RelayedPubs = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "quicmq_relay_publishes_total",
		Help: "Publishes relayed to the node of this region that owns their topic (acknowledged by it).",
	})
	reg.MustRegister(p.conflictGauge, p.RelayedSubs, p.RelayedPubs)
	return p
}

// notifyLocked wakes everyone waiting for a placement change. Callers hold mu.
func (p *Table) notifyLocked() {
	close(p.mu.changed)
	p.mu.changed = make(chan struct{})
}

// MembersChanged is called on every gossip event.
func (p *Table) MembersChanged() {
	p.mu.Lock()
	p.notifyLocked()
	p.mu.Unlock()
	p.cfg.Resync()
}

// OnCatalog records that peer holds topic (a federation callback: must not block).
func (p *Table) OnCatalog(peer federation.Peer, topic string) {
	if peer.Region != p.cfg.Region {
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

// OnCatalogSynced records that peer announced every topic it held (a federation callback).
func (p *Table) OnCatalogSynced(peer federation.Peer) {
	if peer.Region != p.cfg.Region {
		return
	}
	p.mu.Lock()
	p.mu.synced[peer.Name] = true
	p.notifyLocked()
	p.mu.Unlock()
	p.cfg.Resync() // topics this node should now mirror
}

// LocalTopicCreated is called by the topic watcher for each new local log.
func (p *Table) LocalTopicCreated(topic string) {
	p.mu.Lock()
	p.checkConflictLocked(topic)
	p.mu.Unlock()
}

// holdersLocked lists the nodes known to hold topic's log, this one included.
func (p *Table) holdersLocked(topic string) []string {
	var out []string
	if p.cfg.HasLog(topic) {
		out = append(out, p.cfg.Name)
	}
	for name, c := range p.mu.catalogs {
		if _, ok := c[topic]; ok && name != p.cfg.Name {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func (p *Table) checkConflictLocked(topic string) {
	if p.cfg.Replicated {
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
	p.cfg.Log.Error("placement conflict: more than one node of the region holds a log of this topic; "+
		"nothing is merged: every node routes the topic to one of them, the others' records stay where they are until an operator decides",
		"topic", topic, "holders", holders, "serving", routing.Owner(topic, holders))
}

// Conflicts returns the topics with a log on more than one node of this region, with their
// holders.
func (p *Table) Conflicts() map[string][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string][]string, len(p.mu.conflicts))
	for t, h := range p.mu.conflicts {
		out[t] = slices.Clone(h)
	}
	return out
}

// Member is a node of this region as placement sees it.
type Member struct {
	Name   string
	Status gossip.Status
}

// Members lists this region's nodes that have not left (this node included, whatever
// gossip says of it).
func (p *Table) Members() []Member {
	out := []Member{{Name: p.cfg.Name, Status: gossip.StatusAlive}}
	for _, m := range p.cfg.Gossip.RegionMembers(p.cfg.Region) {
		if m.Name == p.cfg.Name || m.Status == gossip.StatusLeft || m.Status == gossip.StatusLeaving {
			continue
		}
		out = append(out, Member{Name: m.Name, Status: m.Status})
	}
	return out
}

// MemberStatus is the gossip status of the region's node name (StatusLeft when unknown).
func (p *Table) MemberStatus(name string) gossip.Status {
	if name == p.cfg.Name {
		return gossip.StatusAlive
	}
	return p.cfg.Gossip.MemberStatus(p.cfg.Region, name)
}

// OwnerNow decides topic's owner from what is known now. ready is false when a live node's
// catalog has not arrived yet, so that a topic it may hold cannot be ruled out; changed is
// closed at the next change.
func (p *Table) OwnerNow(topic string) (owner string, ready bool, changed <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	changed = p.mu.changed
	if holders := p.holdersLocked(topic); len(holders) > 0 {
		return routing.Owner(topic, holders), true, changed
	}
	ms := p.Members()
	names := make([]string, 0, len(ms))
	ready = true
	for _, m := range ms {
		names = append(names, m.Name)
		if m.Name != p.cfg.Name && m.Status == gossip.StatusAlive && !p.mu.synced[m.Name] {
			ready = false
		}
	}
	return routing.Owner(topic, names), ready, changed
}

// Owner decides topic's owner, waiting (up to wait, or ctx) for the catalogs of live nodes
// when no node is known to hold it. A non-nil error says why the topic cannot be served now;
// it names the owner when the owner is the problem.
func (p *Table) Owner(ctx context.Context, topic string) (string, *wire.Error) {
	timeout := time.NewTimer(p.wait)
	defer timeout.Stop()
	for {
		owner, ready, changed := p.OwnerNow(topic)
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

// WaitCatalogs waits (up to wait, or ctx) until the catalog of every live node of the region
// has arrived, so that a subscription spanning the region finds every node's topics.
func (p *Table) WaitCatalogs(ctx context.Context) *wire.Error {
	timeout := time.NewTimer(p.wait)
	defer timeout.Stop()
	for {
		_, ready, changed := p.OwnerNow("")
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
func (p *Table) available(owner, topic string) *wire.Error {
	if owner == p.cfg.Name {
		return nil
	}
	switch st := p.MemberStatus(owner); st {
	case gossip.StatusAlive:
		if p.cfg.Connected(owner) {
			return nil
		}
		return wire.Errorf(wire.CodeUnavailable,
			"topic %q is owned by node %q of region %q, which this node cannot reach (link down); retry when it is back",
			topic, owner, p.cfg.Region)
	default:
		what := "has failed (gossip lost contact with it)"
		if st == gossip.StatusLeft || st == gossip.StatusLeaving {
			what = "has left the region"
		}
		return wire.Errorf(wire.CodeUnavailable,
			"topic %q is owned by node %q of region %q, which %s: the topic is unavailable until that node returns (its log stays there)",
			topic, owner, p.cfg.Region, what)
	}
}

// ShouldMirror tells the federation whether this node mirrors topic for its region: only
// the topic's owner does, and only once placement is sure.
func (p *Table) ShouldMirror(topic string) bool {
	if p.cfg.Replicated { // the leader of a replicated topic's group mirrors it
		return p.cfg.MirrorReplicated(topic)
	}
	owner, ready, _ := p.OwnerNow(topic)
	return ready && owner == p.cfg.Name
}

// ServedElsewhere reports whether topic's log here is a conflict's copy that another holder
// serves.
func (p *Table) ServedElsewhere(topic string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, ok := p.mu.conflicts[topic]
	return ok && routing.Owner(topic, h) != p.cfg.Name
}

// Holders lists the nodes known to hold topic's log, this one included (a copy).
func (p *Table) Holders(topic string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.holdersLocked(topic)
}

// Changed is closed at the next placement change.
func (p *Table) Changed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.changed
}

// HoldsMatching reports whether node name is known to hold a topic matching pattern.
func (p *Table) HoldsMatching(name, pattern string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for t := range p.mu.catalogs[name] {
		if routing.Match(pattern, t) {
			return t, true
		}
	}
	return "", false
}

// ForgetCatalogs drops topic from every peer's catalog, as before they named it: for tests
// of what a node does when it does not know where a topic is.
func (p *Table) ForgetCatalogs(topic string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.mu.catalogs {
		delete(c, topic)
	}
}
