package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"

	"github.com/quicmq/quicmq/federation"
	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/features"
	"github.com/quicmq/quicmq/replica"
	"github.com/quicmq/quicmq/routing"
	"github.com/quicmq/quicmq/wal"
)

// replicated runs a node's replicated topics (Config.Replicas > 1): one replica.Driver on
// the wal.Log's own Pebble DB runs every raft group of the node, with the region's
// metadata group (metaGroup, a LogSM: its records are placements) and one group per topic
// (a WalSM: records in wal's layout, so subscriptions read them as any topic).
//
// The metadata group forms once: its voters are the region's first Replicas nodes by name
// that are alive and carry a raft ID in gossip, counted by every node alike (bootstrap-expect,
// as Consul's); once formed it is stored and never formed again. Its leader decides the
// replica set of a new topic (routing.Place over the metadata voters) and proposes it; every
// voter applies the placements in log order, the first one of a topic wins, and a voter in a
// topic's set opens that topic's group. So a topic gets one replica set, decided once (I6
// by construction). A node outside the metadata group serves no replicated topic yet.
//
// Goroutines (started by Run through runMesh, stopped before the log closes): the driver's
// Run, form (until the metadata group is open), watchMeta (reads placements as they
// commit) and observe (raft status for metrics and leader changes). State is under mu.
type replicated struct {
	n    *Node
	id   uint64 // this node's raft ID
	d    *replica.Driver
	meta *replica.LogSM
	sm   *replica.WalSM
	wake chan struct{} // capacity 1: a round committed (the metadata log may have grown)
	// placeWake (capacity 1) wakes the placer goroutine: topics are queued (replgroups.go).
	placeWake chan struct{}
	// batchCheck is when checkBatching last asked the region (Unix nanoseconds).
	batchCheck atomic.Int64
	// appliedAt is, by group, when it last applied entries here (*atomic.Int64, Unix
	// nanoseconds): a publish waiting in a group that progresses is not timed out (propose).
	appliedAt sync.Map

	// pl is the placement index: which group holds each topic and each group's replicas,
	// as the metadata records applied so far say. Under a lock of its own, never held while
	// calling the driver: the state machine reads it on the driver's goroutine (groupOf).
	pl struct {
		sync.RWMutex
		topics map[string]uint64    // topic -> group
		groups map[uint64]*repGroup // every group declared, this node's or not
		many   map[int][]uint64     // groups of many topics by replica count, in declaration order
		nextID uint64               // above every group of many topics declared
		// narrow: placed topics on fewer nodes than --replicas: not every node holds every topic
		narrow int
		// waiting: topics creations wait for, each closed when it is placed (placedCh)
		waiting map[string]chan struct{}
	}

	// ask: topics to ask the metadata leader to place, for the asker goroutine (replask.go).
	ask struct {
		sync.Mutex
		q    []*askReq
		wake chan struct{} // capacity 1
	}

	elections *electionCounter // metrics (replmetrics.go)
	rejoinM   *rejoinMetrics   // replmember.go
	rejoin    rejoinState      // owned by the observe goroutine
	drain     drainer          // drain.go: drained nodes, leader hand-offs and balance
	moves     mover            // move.go: nodes being removed and replica moves
	bal       balancer         // balance.go: the replica balancer and replacements (moveLoop's goroutine)

	mu struct {
		sync.Mutex
		formed bool
		voters []uint64 // the metadata group's voters, once formed
		// learners: the metadata group's learners, the nodes of a region larger than
		// Replicas past its first Replicas; topics are placed on them too.
		learners []uint64
		// outside: the region formed without this node: the names of its voters, to relay
		// to until this node, a learner, has read the placements.
		outside []string
		forming []string // alive nodes with raft IDs while fewer than Replicas
		// ids is each node name's raft ID as the metadata log says (placements, member
		// records: the last wins); names every raft ID the log ever named.
		ids   map[string]uint64
		names map[uint64]string
		// joining: this node opened the metadata group empty, as a new member.
		joining bool
		read    uint64 // metadata records read
		status  map[uint64]raft.BasicStatus
		changed chan struct{} // closed and replaced on every change
		// sentBack: when a batch of a topic was last relayed back to the node that relayed
		// it here (topic NUL node), rerouteRoute's bound on ping-pong.
		sentBack map[string]sentBack

		// Background placements asked by ShouldMirror (placeLater), run on wg while
		// ctx lives; stopped is set when observe returns, after which none start.
		ctx     context.Context
		wg      *sync.WaitGroup
		stopped bool
		placing map[string]bool
		placeQ  []placeReq // topics waiting for the placer (replgroups.go)
		many    bool       // manyGroups's last answer, at manyAt
		manyAt  time.Time
	}
}

// metaGroup is the raft group of the region's metadata; topicGroup never returns it.
const metaGroup uint64 = 1

// tagRaft is the gossip tag holding a node's raft ID (decimal).
const tagRaft = "raft"

// topicGroup is the group of a replicated topic: replica.TopicGroup, except the metadata
// group's ID.
func topicGroup(topic string) uint64 {
	if g := replica.TopicGroup(topic); g != metaGroup {
		return g
	}
	return metaGroup + 1
}

// repTopic is a replicated topic as the metadata group placed it.
type repTopic struct {
	name     string
	group    uint64
	replicas []repMember // in routing.Place's preference order, with their current raft IDs
	boot     []uint64    // the raft IDs the placement named: the group's bootstrap peers
	local    bool        // this node is one of them
}

type repMember struct {
	name string
	id   uint64
}

func (t *repTopic) names() []string {
	out := make([]string, len(t.replicas))
	for i, m := range t.replicas {
		out[i] = m.name
	}
	return out
}

func (t *repTopic) nameOf(id uint64) string {
	for _, m := range t.replicas {
		if m.id == id {
			return m.name
		}
	}
	return ""
}

// newReplicated builds the driver and state machines; nothing runs until start.
func newReplicated(n *Node, id uint64) (*replicated, error) {
	r := &replicated{n: n, id: id, wake: make(chan struct{}, 1), placeWake: make(chan struct{}, 1)}
	r.pl.topics = make(map[string]uint64)
	r.pl.groups = make(map[uint64]*repGroup)
	r.pl.many = make(map[int][]uint64)
	r.ask.wake = make(chan struct{}, 1)
	r.mu.ids = make(map[string]uint64)
	r.mu.names = make(map[uint64]string)
	r.mu.status = make(map[uint64]raft.BasicStatus)
	r.mu.changed = make(chan struct{})
	r.mu.placing = make(map[string]bool)
	sm, err := replica.NewWalSM(replica.WalSMConfig{Log: n.wal, DedupWindow: n.cfg.MaxPendingPublishes, GroupOf: r.groupOf})
	if err != nil {
		return nil, fmt.Errorf("node: replicated topics: %w", err)
	}
	r.sm, r.meta = sm, replica.NewLogSM(n.wal.DB())
	c := n.cfg.Raft
	r.d, err = replica.New(replica.Config{
		NodeID: id, DB: n.wal.DB(), StateMachine: (*nodeSM)(r), Transport: n.fed,
		TickInterval: c.TickInterval, ElectionTicks: c.ElectionTicks, HeartbeatTicks: c.HeartbeatTicks,
		DisableQuiescence: c.DisableQuiescence,
		LogCompaction:     !c.DisableLogCompaction, Fetcher: n.fed,
		Now: n.cfg.Now, Logger: n.log.With("raft_id", id),
	})
	if err != nil {
		return nil, fmt.Errorf("node: replicated topics: %w", err)
	}
	r.elections = newElectionCounter(n.reg, n.cfg.MaxSeriesPerMetric)
	r.rejoinM = newRejoinMetrics(n.reg)
	r.drain.init(n.reg)
	r.moves.init(n.reg)
	r.bal.init(n.reg)
	r.rejoin = rejoinState{silentSince: map[[2]uint64]time.Time{}, last: map[[2]uint64]replica.ReplaceState{}, learnerAt: map[[2]uint64]time.Time{}}
	n.reg.MustRegister(&raftCollector{r: r})
	return r, nil
}

// nodeSM routes the metadata group's entries to the LogSM and every other group's to the
// WalSM. The driver's goroutine calls it.
type nodeSM replicated

func (s *nodeSM) Applied(group uint64) (uint64, error) {
	if group == metaGroup {
		return s.meta.Applied(group)
	}
	return s.sm.Applied(group)
}

func (s *nodeSM) Apply(b *pebble.Batch, group, applied uint64, ents []replica.Entry) ([]replica.Result, error) {
	if group == metaGroup {
		return s.meta.Apply(b, group, applied, ents)
	}
	if len(ents) > 0 {
		(*replicated)(s).noteApplied(group)
	}
	return s.sm.Apply(b, group, applied, ents)
}

// maxQueuedPublish bounds how long a publish waits behind others while its group progresses
// (propose, and a relay to its leader): 6 QuorumTimeouts, at least 30 s (Kafka's request
// timeout); past it the publish fails even so.
func (r *replicated) maxQueuedPublish() time.Duration {
	return max(6*r.n.cfg.Raft.QuorumTimeout, 30*time.Second)
}

// noteApplied records that group applied entries now (on the driver's goroutine).
func (r *replicated) noteApplied(group uint64) {
	at, ok := r.appliedAt.Load(group)
	if !ok {
		at, _ = r.appliedAt.LoadOrStore(group, new(atomic.Int64))
	}
	at.(*atomic.Int64).Store(time.Now().UnixNano())
}

// appliedSince says whether group applied entries at this node at or after t.
func (r *replicated) appliedSince(group uint64, t time.Time) bool {
	at, ok := r.appliedAt.Load(group)
	return ok && at.(*atomic.Int64).Load() >= t.UnixNano()
}

// The snapshots of both (metadata only) and the records their catch-ups fetch, by group
// likewise (replica.Snapshotter).

func (s *nodeSM) snapshotter(group uint64) replica.Snapshotter {
	if group == metaGroup {
		return s.meta
	}
	return s.sm
}

func (s *nodeSM) SnapshotData(group uint64) (uint64, []byte, error) {
	return s.snapshotter(group).SnapshotData(group)
}

func (s *nodeSM) Missing(group uint64, data []byte) ([]replica.Span, error) {
	return s.snapshotter(group).Missing(group, data)
}

func (s *nodeSM) ReadChunk(group uint64, log string, from, to uint64, maxBytes int) ([]byte, uint64, error) {
	return s.snapshotter(group).ReadChunk(group, log, from, to, maxBytes)
}

func (s *nodeSM) ImportChunk(b *pebble.Batch, group uint64, log string, to uint64, chunk []byte) (int, error) {
	return s.snapshotter(group).ImportChunk(b, group, log, to, chunk)
}

func (s *nodeSM) Restore(b *pebble.Batch, group, index uint64, data []byte) (func() error, error) {
	return s.snapshotter(group).Restore(b, group, index, data)
}

func (s *nodeSM) Committed() {
	s.meta.Committed()
	s.sm.Committed()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// start runs the driver and the goroutines of replicated topics on wg until ctx ends.
func (r *replicated) start(ctx context.Context, wg *sync.WaitGroup) {
	r.mu.Lock()
	r.mu.ctx, r.mu.wg = ctx, wg
	r.mu.Unlock()
	starts := []func(context.Context){
		r.placer,    // replgroups.go
		r.asker,     // replask.go
		r.drainLoop, // drain.go
		r.moveLoop,  // move.go
		r.retain,    // replretain.go
		r.runDriver,
		r.form,
		r.watchMeta,
		r.observe,
	}
	wg.Add(len(starts)) // one count per goroutine, whatever the list holds
	for _, run := range starts {
		go func() { defer wg.Done(); run(ctx) }()
	}
}

// runDriver runs the raft driver until ctx ends.
func (r *replicated) runDriver(ctx context.Context) {
	if err := r.d.Run(ctx); err != nil {
		r.n.log.Error("raft driver stopped: replicated topics are unavailable on this node until it restarts", "err", err)
	}
}

func (r *replicated) notifyLocked() {
	close(r.mu.changed)
	r.mu.changed = make(chan struct{})
}

func (r *replicated) changedCh() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.changed
}

// raftMember is a node of the region with a raft ID, as gossip tells.
type raftMember struct {
	name  string
	id    uint64
	alive bool
}

// raftMembers lists the region's nodes that gossip knows with a raft ID, this one
// included, by name.
func (r *replicated) raftMembers() []raftMember {
	n := r.n
	out := []raftMember{{name: n.cfg.Name, id: r.id, alive: true}}
	for _, m := range n.gossip.RegionMembers(n.cfg.Region) {
		if m.Name == n.cfg.Name || m.Status == gossip.StatusLeft || m.Status == gossip.StatusLeaving {
			continue
		}
		id, err := strconv.ParseUint(m.Tags[tagRaft], 10, 64)
		if err != nil || id == 0 {
			continue
		}
		out = append(out, raftMember{name: m.Name, id: id, alive: m.Status == gossip.StatusAlive})
	}
	slices.SortFunc(out, func(a, b raftMember) int { return strings.Compare(a.name, b.name) })
	return out
}

// form opens the metadata group: the stored one, or, when none is stored, a new one once
// Replicas nodes of the region are alive with raft IDs, if this node is among the first
// Replicas of them by name.
func (r *replicated) form(ctx context.Context) {
	n := r.n
	retry := time.NewTicker(n.cfg.Raft.ObserveInterval)
	defer retry.Stop()
	for {
		changed := n.place.Changed()
		if r.tryForm(ctx) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-retry.C:
		}
	}
}

func (r *replicated) tryForm(ctx context.Context) bool {
	n := r.n
	err := r.d.AddGroup(ctx, metaGroup, nil) // the stored group, if any
	formed, metaNames := r.regionFormed()
	learner := false
	if err != nil && formed && !slices.Contains(metaNames, n.cfg.Name) {
		// Formed without this node (a region of more than Replicas nodes): it joins the
		// metadata group empty, the leader adds it as a learner (replmember.go), and once it
		// has read the placements it holds the replicas placed on it. Until then it relays
		// to the voters (viaVoter).
		if err = r.d.JoinGroup(ctx, metaGroup); err != nil {
			n.log.Warn("could not join the region's metadata group", "err", err)
			return false
		}
		n.log.Info("joining the region's metadata group as a learner: the region has more nodes than replicas per topic, and topics are placed on this node too",
			"raft_id", r.id, "voters", metaNames)
		learner = true
	}
	if err != nil && formed {
		// The region's metadata group exists and this node stores nothing of it: it was
		// wiped (or is new under a name of the region). It joins empty, and the group's
		// leader replaces its old ID by this one once it has caught up (replmember.go).
		if err = r.d.JoinGroup(ctx, metaGroup); err != nil {
			n.log.Warn("could not join the region's metadata group", "err", err)
			return false
		}
		n.log.Info("joining the region's metadata group as a new member: its leader adds this node as a learner, which catches up before it votes",
			"raft_id", r.id)
		r.mu.Lock()
		r.mu.joining = true
		r.mu.Unlock()
	}
	if err != nil {
		var alive []raftMember
		for _, m := range r.raftMembers() {
			if m.alive {
				alive = append(alive, m)
			}
		}
		if len(alive) < n.cfg.Replicas {
			r.mu.Lock()
			r.mu.forming = nil
			for _, m := range alive {
				r.mu.forming = append(r.mu.forming, m.name)
			}
			r.mu.Unlock()
			return false
		}
		voters := alive[:n.cfg.Replicas]
		var ids []uint64
		var names []string
		for _, m := range voters {
			ids, names = append(ids, m.id), append(names, m.name)
		}
		if !slices.Contains(ids, r.id) {
			r.mu.Lock()
			r.mu.outside = names
			r.mu.Unlock()
			return false
		}
		if err = r.d.AddGroup(ctx, metaGroup, ids); err != nil {
			n.log.Warn("could not form the region's metadata group", "voters", names, "err", err)
			return false
		}
		n.log.Info("formed the region's metadata group", "voters", names)
	}
	var voters, learners []uint64
	if m, err := r.d.Membership(ctx, metaGroup); err == nil {
		voters, learners = m.Voters, m.Learners
	}
	r.mu.Lock()
	r.mu.formed, r.mu.voters, r.mu.learners, r.mu.outside, r.mu.forming = true, voters, learners, nil, nil
	if learner {
		r.mu.outside = metaNames // until it has caught up (observe)
	}
	r.notifyLocked()
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	// After waking watchMeta: setting gossip tags waits for the update's broadcast (up to
	// a gossip interval per pool, ~0.7 s with the WAN pool), and opening this node's
	// topic groups needs nothing from it.
	r.advertiseFormed(ctx)
	return true
}

// watchMeta reads the metadata group's placements as they are applied and opens the group
// of every topic placed on this node.
func (r *replicated) watchMeta(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
		for {
			r.mu.Lock()
			from, formed := r.mu.read, r.mu.formed
			r.mu.Unlock()
			if !formed {
				break
			}
			recs, err := r.meta.Read(metaGroup, from, 256)
			if err != nil {
				r.n.log.Error("reading the region's metadata failed", "err", err)
				break
			}
			for _, rec := range recs {
				switch {
				case len(rec.Data) > 0 && rec.Data[0] == memberVersion:
					r.applyMember(rec.Data)
				case len(rec.Data) > 0 && rec.Data[0] == groupsVersion:
					r.applyGroups(ctx, rec.Data) // replgroups.go
				case len(rec.Data) > 0 && rec.Data[0] == drainVersion:
					r.applyDrain(rec.Data) // drain.go
				case len(rec.Data) > 0 && rec.Data[0] == moveVersion:
					r.applyMove(ctx, rec.Data) // move.go
				default:
					r.applyPlacement(ctx, rec.Data)
				}
			}
			r.mu.Lock()
			r.mu.read += uint64(len(recs))
			r.notifyLocked()
			r.mu.Unlock()
			if len(recs) > 0 {
				r.n.fed.Resync() // topics this node may now mirror (shouldMirror)
			}
			if len(recs) < 256 {
				break
			}
		}
	}
}

// applyPlacement applies a placement record of version 1: a topic in a group of its own
// (the layout of regions formed before groups held many topics). The first placement of a
// topic wins.
func (r *replicated) applyPlacement(ctx context.Context, data []byte) {
	t, err := decodePlacement(data)
	if err != nil {
		r.n.log.Error("a metadata record could not be decoded; it is skipped on every node alike", "err", err)
		return
	}
	g := &repGroup{id: t.group, replicas: t.replicas, boot: t.boot, label: t.name}
	// A replica is named by its node's name: a node restarted empty holds what its name
	// held, under its new raft ID (replmember.go).
	for _, m := range t.replicas {
		g.local = g.local || m.name == r.n.cfg.Name
	}
	if g.local && r.n.wal.IsLocal(t.name) {
		// A single-copy log of the name exists here (a mirror or a dead-letter append made
		// it before the placement): binding it would stop the driver. This replica stays
		// out of the group; the others hold the topic.
		r.n.log.Error("a replicated topic has a single-copy log of its name on this node: this node does not take its replica",
			"topic", t.name, "replicas", t.names())
		g.local = false
	}
	r.nameReplicas(g)
	r.pl.Lock()
	if _, placed := r.pl.topics[t.name]; placed || r.pl.groups[g.id] != nil {
		r.pl.Unlock()
		return
	}
	r.declareLocked(g)
	r.placeLocked(t.name, g)
	r.pl.Unlock()
	if g.local {
		r.openGroup(ctx, g)
	}
}

// lookup returns topic's placement, if decided.
func (r *replicated) lookup(topic string) *repTopic {
	r.pl.RLock()
	defer r.pl.RUnlock()
	id, ok := r.pl.topics[topic]
	if !ok {
		return nil
	}
	g := r.pl.groups[id]
	return &repTopic{name: topic, group: id, replicas: g.replicas, boot: g.boot, local: g.local}
}

// localGroups returns the groups this node holds a replica of.
func (r *replicated) localGroups() []*repGroup {
	r.pl.RLock()
	defer r.pl.RUnlock()
	var out []*repGroup
	for _, g := range r.pl.groups {
		if g.local {
			out = append(out, g)
		}
	}
	slices.SortFunc(out, func(a, b *repGroup) int { return cmp.Compare(a.id, b.id) })
	return out
}

// wide reports whether this node's region has more nodes than Replicas in its metadata
// group (learners): its topics are then spread, no node holding them all. False on a nil
// receiver.
func (r *replicated) wide() bool {
	if r == nil {
		return false
	}
	r.mu.Lock()
	learners := len(r.mu.learners)
	r.mu.Unlock()
	r.pl.RLock()
	defer r.pl.RUnlock()
	return learners > 0 || r.pl.narrow > 0
}

// isLocal reports whether this node holds a replica of topic, a replicated topic of its
// region. False on a nil receiver.
func (r *replicated) isLocal(topic string) bool {
	if r == nil {
		return false
	}
	t := r.lookup(topic)
	return t != nil && t.local
}

// isReplicated reports whether topic is a replicated topic of this region.
func (r *replicated) isReplicated(topic string) bool { return r.lookup(topic) != nil }

// ensure returns topic's placement, having the metadata leader decide it when the topic is
// new. relayed: the request came from another node, so it is not passed on again.
func (r *replicated) ensure(ctx context.Context, topic string, relayed bool) (*repTopic, *wire.Error) {
	return r.ensureReplicas(ctx, topic, relayed, 0)
}

// ensureReplicas is ensure placing a new topic on replicas nodes (0: the region's
// --replicas). A topic placed already is returned whatever its count: the caller compares.
func (r *replicated) ensureReplicas(ctx context.Context, topic string, relayed bool, replicas int) (*repTopic, *wire.Error) {
	if t := r.lookup(topic); t != nil {
		return t, nil // every publish asks: no context or timer for a topic placed
	}
	n := r.n
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Raft.QuorumTimeout)
	defer cancel()
	// Until the topic is asked for, every change of the region is looked at and the state
	// polled each tick; once asked, only its own placement (placedCh), the ask's answer and,
	// at an election's pace, a change of metadata leader wake it: thousands of creations
	// wait at once, and each metadata record applied or tick would wake them all (replask.go).
	poll := time.NewTimer(n.cfg.Raft.TickInterval)
	defer poll.Stop()
	var askDone <-chan *wire.Error // the batched ask's answer (replask.go)
	waited := false                // placedCh made for topic: forgotten when this gives up
	defer func() {
		if waited && r.lookup(topic) == nil {
			r.unwaitPlaced(topic)
		}
	}()
	asked, askedLead := false, uint64(0)
	var notLeader time.Time // relayed: when this node first found it does not lead the metadata
	var lastErr *wire.Error // the last refusal of a metadata leader asked, told at the timeout
	for {
		r.mu.Lock()
		formed, changed := r.mu.formed, r.mu.changed
		outside, forming := r.mu.outside, r.mu.forming
		r.mu.Unlock()
		if t := r.lookup(topic); t != nil {
			return t, nil
		}
		if !formed && outside != nil {
			return nil, wire.Errorf(wire.CodeUnavailable,
				"topic %q: node %q is not one of the %d nodes of region %q that hold its replicated topics (%s): connect to one of them",
				topic, n.cfg.Name, len(outside), n.cfg.Region, strings.Join(outside, ", "))
		}
		if asked && r.leaderID(ctx, metaGroup) != askedLead {
			asked = false // the leader asked lost its office before placing the topic: ask again
		}
		if formed && !asked {
			switch lead := r.leaderID(ctx, metaGroup); {
			case lead == r.id:
				if e := r.place(ctx, topic, replicas); e != nil {
					return nil, e
				}
				asked, askedLead = true, lead
			case lead != 0 && relayed:
				// Asked by a node that took this one for the metadata leader, or by one that
				// has read the topic's placement and relays to this node as the leader of its
				// group (a retention to store), which may not have read it yet: the placement
				// is waited for a little, then the sender is told to ask again.
				if notLeader.IsZero() {
					notLeader = time.Now()
				}
				if time.Since(notLeader) > n.cfg.Raft.TickInterval*time.Duration(n.cfg.Raft.ElectionTicks) {
					return nil, wire.Errorf(wire.CodeUnavailable, "topic %q: node %q no longer leads region %q's metadata; retry", topic, n.cfg.Name, n.cfg.Region)
				}
			case lead != 0 && replicas == 0:
				askDone = r.askBatched(lead, topic) // many topics per stream to the leader
				asked, askedLead = true, lead
			case lead != 0:
				e := r.askPlace(ctx, lead, topic, replicas)
				switch {
				case e == nil:
					asked, askedLead = true, lead
				case e.Code != wire.CodeUnavailable:
					return nil, e
				default:
					// The leader changed (or is changing) under the request: asked again at
					// the next poll, of the leader then known, until the timeout.
					lastErr = e
				}
			}
		}
		var wake <-chan struct{} = changed
		every := n.cfg.Raft.TickInterval
		if formed && (asked || relayed) {
			// relayed: the sender read the placement or asked this node as the leader; it
			// is applied here soon
			wake, every, waited = r.placedCh(topic), r.slowPoll(), true
		}
		poll.Reset(every)
		select {
		case <-wake:
		case e := <-askDone:
			askDone = nil
			switch {
			case e == nil: // placed on the leader: applied here soon (placedCh)
			case e.Code != wire.CodeUnavailable:
				return nil, e
			default:
				lastErr, asked = e, false // asked again, of the leader then known
			}
		case <-poll.C:
		case <-ctx.Done():
			if lastErr != nil && r.lookup(topic) == nil {
				return nil, lastErr
			}
			if !formed {
				return nil, wire.Errorf(wire.CodeUnavailable,
					"topic %q: region %q keeps %d replicas of each topic and has %d node(s) with raft IDs alive (%s): its replicated topics are unavailable until %d are",
					topic, n.cfg.Region, n.cfg.Replicas, len(forming), strings.Join(forming, ", "), n.cfg.Replicas)
			}
			return nil, wire.Errorf(wire.CodeUnavailable,
				"topic %q: region %q's metadata group did not place it within %v (no quorum of its nodes: %s); retry",
				topic, n.cfg.Region, n.cfg.Raft.QuorumTimeout, r.metaLacking())
		}
	}
}

// metaLacking names the metadata voters this node cannot reach.
func (r *replicated) metaLacking() string {
	r.mu.Lock()
	voters := slices.Clone(r.mu.voters)
	r.mu.Unlock()
	var out []string
	for _, m := range r.raftMembers() {
		if slices.Contains(voters, m.id) && !r.reachable(m.name) {
			out = append(out, m.name)
		}
	}
	if len(out) == 0 {
		return "every voter is reachable from here"
	}
	return "unreachable: " + strings.Join(out, ", ")
}

// leaderID is the group's leader as this node knows it (0: none).
func (r *replicated) leaderID(ctx context.Context, group uint64) uint64 {
	if ro, ok := r.d.Role(group); ok {
		return ro.Lead
	}
	st, err := r.d.Status(ctx, group)
	if err != nil {
		return 0
	}
	return st.Lead
}

// place decides topic's replica set on the metadata leader and proposes it.
func (r *replicated) place(ctx context.Context, topic string, replicas int) *wire.Error {
	n := r.n
	if replicas == 0 {
		replicas = n.cfg.Replicas
	}
	r.mu.Lock()
	members := append(slices.Clone(r.mu.voters), r.mu.learners...) // learners: nodes past the first Replicas
	r.mu.Unlock()
	if replicas > len(members) {
		return wire.Errorf(wire.CodeInvalidArgument, "topic %q: %d replicas asked, but region %q has %d nodes that hold replicated topics", topic, replicas, n.cfg.Region, len(members))
	}
	if r.manyGroups() {
		r.placeMany(topic, replicas) // replgroups.go: on a group of many topics
		return nil
	}
	r.pl.RLock()
	holdings := make(map[string][]string, len(r.pl.groups))
	for _, g := range r.pl.groups {
		holdings[g.label] = g.names()
	}
	r.pl.RUnlock()
	ids := make(map[string]uint64)
	var eligible []routing.PlacementMember
	for _, m := range r.raftMembers() {
		if !slices.Contains(members, m.id) {
			continue
		}
		ids[m.name] = m.id
		eligible = append(eligible, routing.PlacementMember{ID: m.name, Eligible: m.alive})
	}
	p := routing.Place(eligible, holdings, []routing.PlacementRequest{{Topic: topic, Replicas: replicas}})[0]
	if p.Err != nil {
		return wire.Errorf(wire.CodeUnavailable, "topic %q: %v", topic, p.Err)
	}
	t := &repTopic{name: topic, group: topicGroup(topic)}
	for _, name := range p.Replicas {
		t.replicas = append(t.replicas, repMember{name: name, id: ids[name]})
	}
	if _, err := r.d.Propose(ctx, metaGroup, encodePlacement(t)); err != nil {
		return wire.Errorf(wire.CodeUnavailable, "topic %q: placing it through region %q's metadata group: %v; retry", topic, n.cfg.Region, err)
	}
	return nil
}

// askPlace asks the metadata leader (raft ID lead) to place topic, over a peer stream
// (TOPIC_CREATE, answered by TOPIC_INFO: docs/protocol.md, replicated regions).
func (r *replicated) askPlace(ctx context.Context, lead uint64, topic string, replicas int) *wire.Error {
	n := r.n
	name := ""
	for _, m := range r.raftMembers() {
		if m.id == lead {
			name = m.name
		}
	}
	if name == "" {
		return nil // not known yet in gossip: the caller waits and asks again
	}
	err := n.streamTo(ctx, name, &wire.TopicCreate{Topic: topic, Replicas: uint64(replicas)}, func(f wire.Frame) error {
		if _, ok := f.(*wire.TopicInfo); !ok {
			return fmt.Errorf("unexpected %s", f.Type())
		}
		return nil
	})
	var we *wire.Error
	if errors.As(err, &we) && we.Code == wire.CodeInvalidArgument {
		return we // the request's own fault (a replica count the region cannot give): as the leader said it
	}
	if err != nil {
		return wire.Errorf(wire.CodeUnavailable, "topic %q: the leader of region %q's metadata, node %q, did not place it: %v", topic, n.cfg.Region, name, err)
	}
	return nil
}

// reachable reports whether node name of the region can be reached now.
func (r *replicated) reachable(name string) bool {
	n := r.n
	return name == n.cfg.Name || (n.place.MemberStatus(name) == gossip.StatusAlive && n.fed.Connected(name))
}

// lacking names t's replicas that this node cannot reach.
func (r *replicated) lacking(t *repTopic) []string {
	var out []string
	for _, m := range t.replicas {
		if !r.reachable(m.name) {
			out = append(out, m.name)
		}
	}
	return out
}

func (r *replicated) noQuorum(t *repTopic, what string) *wire.Error {
	lack := r.lacking(t)
	missing := "none: the replicas are reachable but did not elect a leader in time"
	if len(lack) > 0 {
		missing = strings.Join(lack, ", ")
	}
	return wire.Errorf(wire.CodeUnavailable,
		"topic %q (replicas %s of region %q) %s within %v: it needs a quorum of %d of its %d replicas; replicas this node cannot reach: %s",
		t.name, strings.Join(t.names(), ", "), r.n.cfg.Region, what, r.n.cfg.Raft.QuorumTimeout, len(t.replicas)/2+1, len(t.replicas), missing)
}

// waitLeader returns the raft ID of t's leader, waiting up to QuorumTimeout for one.
func (r *replicated) waitLeader(ctx context.Context, t *repTopic) (uint64, *wire.Error) {
	n := r.n
	if !t.local {
		return 0, wire.Errorf(wire.CodeUnavailable, "topic %q: this node is not one of its replicas (%s)", t.name, strings.Join(t.names(), ", "))
	}
	// The leader as of the group's last round, without waiting for the driver (a round
	// may be in its fsync): what every publish asks.
	// A leader handing its leadership over (drain.go) refuses proposals: wait for the new one.
	if ro, ok := r.d.Role(t.group); ok && ro.Lead != 0 && (ro.Lead == r.id) == ro.Leader && !ro.Moving &&
		(ro.Lead == r.id || r.reachable(t.nameOf(ro.Lead))) {
		return ro.Lead, nil
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Raft.QuorumTimeout)
	defer cancel()
	poll := time.NewTicker(n.cfg.Raft.TickInterval)
	defer poll.Stop()
	woken := uint64(0)
	for {
		st, err := r.d.Status(ctx, t.group)
		if err == nil && st.Lead != 0 && st.Lead != r.id && st.Lead != woken && !r.reachable(t.nameOf(st.Lead)) {
			// A quiet group does not notice its leader's loss by itself.
			woken = st.Lead
			_ = r.d.WakeLedBy(ctx, st.Lead)
		}
		// A leader this node cannot reach (its node failed, its link is down) is as good as
		// none: a new one is elected within an election timeout, or there is no quorum.
		if err == nil && st.Lead != 0 && (st.Lead == r.id) == (st.RaftState == raft.StateLeader) && st.LeadTransferee == 0 &&
			(st.Lead == r.id || r.reachable(t.nameOf(st.Lead))) {
			return st.Lead, nil
		}
		if errors.Is(err, replica.ErrStopped) {
			return 0, wire.Errorf(wire.CodeShuttingDown, "node shutting down")
		}
		select {
		case <-poll.C:
		case <-ctx.Done():
			return 0, r.noQuorum(t, "has no leader")
		}
	}
}

// route decides where a publish to a replicated topic goes: "" for this node (it leads the
// topic's group), or the leader's node name. A publish relayed here goes on only to the
// leader this node knows; one relayed by the node this one takes for the leader is refused,
// with that node's name, for the publisher to route again (rerouteRoute).
func (r *replicated) route(ctx context.Context, topic string, relayed bool, from string) (string, *wire.Error) {
	if !relayed {
		if v, outside, e := r.viaVoter(topic); outside {
			return v, e
		}
	}
	t, e := r.ensure(ctx, topic, false)
	if e != nil {
		return "", e
	}
	if !t.local && !relayed {
		// Placed on other nodes of the region (one larger than Replicas): a replica passes
		// the publish on to its leader (below, on that replica).
		return r.viaReplica(t)
	}
	lead, e := r.waitLeader(ctx, t)
	switch {
	case e != nil:
		return "", e
	case lead == r.id:
		return "", nil
	case relayed && t.nameOf(lead) == from:
		// The sender took this node for the leader and this node takes the sender for it:
		// the leadership just moved, most often to the sender, which by now knows it (it
		// won the election before this node heard of it). The publisher routes the batch
		// again off its reader (reroute); from is returned with the refusal for that.
		return from, wire.Errorf(wire.CodeUnavailable,
			"node %q was asked to append to %q but node %q leads its group as far as it knows: the leader just changed; nothing was appended; retry", r.n.cfg.Name, topic, t.nameOf(lead))
	case relayed:
		// Relayed by a node that holds no replica of the topic or has not read its placement
		// yet (viaVoter, viaReplica), or whose view of the leader is older: passed on once
		// more, never back to the sender.
	}
	return t.nameOf(lead), nil
}

// rerouteRoute is route for a batch a leadership move refused (publisher.reroute), or one
// relayed here by the node this one takes for the leader: it may go back to that node.
// Raft lets two nodes take each other for the leader only until the later term reaches
// both (a round trip: the sender won an election this node heard of first, or the
// reverse), so a batch goes back and forth at most a few times; a bound of
// maxSentBack batches per topic and sender within QuorumTimeout keeps a region whose
// views disagree longer (a bug) from passing batches round and round: past it they are
// refused.
func (r *replicated) rerouteRoute(ctx context.Context, topic string, relayed bool, from string) (string, *wire.Error) {
	owner, e := r.route(ctx, topic, relayed, from)
	if e == nil || owner == "" || !relayed {
		return owner, e
	}
	key := topic + "\x00" + from
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	sb := r.mu.sentBack[key]
	if now.Sub(sb.since) > r.n.cfg.Raft.QuorumTimeout {
		sb = sentBack{since: now}
	}
	if sb.count >= maxSentBack {
		return "", e
	}
	sb.count++
	if r.mu.sentBack == nil || len(r.mu.sentBack) > 1024 {
		r.mu.sentBack = map[string]sentBack{} // bounded: what a flapping region leaves here
	}
	r.mu.sentBack[key] = sb
	return owner, nil
}

// maxSentBack bounds the batches of one topic relayed back to one sender within
// QuorumTimeout (rerouteRoute).
const maxSentBack = 256

type sentBack struct {
	since time.Time
	count int
}

// viaVoter returns, on a node outside its region's metadata group (which holds no
// replicated topic), a reachable metadata voter to relay a request for topic to; outside is
// false on a voter or while the region forms.
func (r *replicated) viaVoter(topic string) (voter string, outside bool, e *wire.Error) {
	r.mu.Lock()
	voters := slices.Clone(r.mu.outside)
	r.mu.Unlock()
	t := r.lookup(topic)
	if voters == nil || t != nil && t.local {
		return "", false, nil // a learner catching up serves the replicas it opened already
	}
	// Spread the region's outside nodes over the voters, the same voter for a topic.
	for _, name := range rotate(voters, topic) {
		if r.reachable(name) {
			return name, true, nil
		}
	}
	return "", true, wire.Errorf(wire.CodeUnavailable,
		"topic %q: none of the nodes of region %q that hold its replicated topics (%s) can be reached from node %q",
		topic, r.n.cfg.Region, strings.Join(voters, ", "), r.n.cfg.Name)
}

// viaReplica returns a reachable replica of t, a topic placed on other nodes of this region,
// to relay a request to: the same one for a topic while it is reachable.
func (r *replicated) viaReplica(t *repTopic) (string, *wire.Error) {
	for _, name := range rotate(t.names(), t.name) {
		if r.reachable(name) {
			return name, nil
		}
	}
	return "", wire.Errorf(wire.CodeUnavailable, "topic %q: none of its replicas (%s) can be reached from node %q",
		t.name, strings.Join(t.names(), ", "), r.n.cfg.Name)
}

// remoteLeader asks t's replicas (a topic placed on other nodes of this region) which node
// leads its group, over a peer stream (TOPICS, answered with TOPIC_INFO), the first answer
// naming a leader winning.
func (r *replicated) remoteLeader(ctx context.Context, t *repTopic) (string, *wire.Error) {
	n := r.n
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Raft.QuorumTimeout)
	defer cancel()
	var errs []string
	for _, name := range rotate(t.names(), t.name) {
		if !r.reachable(name) {
			errs = append(errs, name+": unreachable")
			continue
		}
		lead := ""
		err := n.streamTo(ctx, name, &wire.Topics{Pattern: t.name}, func(f wire.Frame) error {
			if ti, ok := f.(*wire.TopicInfo); ok && ti.Name == t.name {
				lead = ti.Leader
			}
			return nil
		})
		switch {
		case err != nil:
			errs = append(errs, fmt.Sprintf("%s: %v", name, err))
		case lead == "":
			errs = append(errs, name+": knows no leader")
		default:
			return lead, nil
		}
	}
	return "", wire.Errorf(wire.CodeUnavailable, "topic %q: no replica of it (%s) named its leader to node %q: %s",
		t.name, strings.Join(t.names(), ", "), n.cfg.Name, strings.Join(errs, "; "))
}

// rotate orders names by rendezvous weight for topic.
func rotate(names []string, topic string) []string {
	first := routing.Owner(topic, names)
	i := slices.Index(names, first)
	return append(slices.Clone(names[i:]), names[:i]...)
}

// leaderName is the node leading topic's group as far as this node knows ("" if none).
func (r *replicated) leaderName(topic string) string {
	t := r.lookup(topic)
	if t == nil {
		return ""
	}
	r.mu.Lock()
	st, ok := r.mu.status[t.group]
	r.mu.Unlock()
	if !ok {
		return ""
	}
	return t.nameOf(st.Lead)
}

// replicatedError carries what a client is told about a replicated append. unknown: the
// entry may still commit (or has), so the publish must not be refused with PUBLISH_ERROR
// (which says nothing was appended): its stream ends instead (publish.go).
type replicatedError struct {
	e       *wire.Error
	unknown bool
	// moved: refused before raft appended it, because this node no longer leads the group
	// or is handing its leadership over; the publisher routes it again (reroute).
	moved bool
}

func (e *replicatedError) Error() string { return e.e.Message }

// propose appends records to topic through its group (this node leads it) and calls done
// once with the outcome: after the entry is committed by a quorum and applied here, or with
// an error within QuorumTimeout. Proposals made one after another by one goroutine enter
// the log in that order.
func (r *replicated) propose(topic string, recs []wal.Record, done func(wal.AppendResult)) {
	n := r.n
	r.checkBatching()
	t := r.lookup(topic)
	fail := func(e *wire.Error) { done(wal.AppendResult{Err: &replicatedError{e: e}}) }
	if t == nil {
		fail(wire.Errorf(wire.CodeUnavailable, "topic %q is not placed yet; retry", topic))
		return
	}
	data, err := replica.EncodeEntry(nil, &replica.WalEntry{Kind: replica.EntryAppend, Topic: topic, Records: recs})
	if err != nil {
		fail(wire.Errorf(wire.CodeInvalidArgument, "%v", err))
		return
	}
	var (
		once    sync.Once
		settled atomic.Bool
	)
	finish := func(res wal.AppendResult) {
		once.Do(func() {
			settled.Store(true)
			done(res)
		})
	}
	// The publish fails when its group stops making progress for QuorumTimeout, not when it
	// has waited that long: a leader short of CPU or disk queues the publishes its clients
	// keep in flight, and one behind thousands of others waits its turn (the clients'
	// windows bound the queue) rather than failing with an unknown outcome. Progress is an
	// entry applied here, or this node still leading the group: raft's CheckQuorum makes a
	// leader that hears from no quorum for an election timeout step down, which fails its
	// pending proposals (ErrDropped) at once.
	q := n.cfg.Raft.QuorumTimeout
	start := time.Now()
	var check func()
	check = func() {
		if settled.Load() {
			return
		}
		now := time.Now()
		role, _ := r.d.Role(t.group)
		if (role.Leader || r.appliedSince(t.group, now.Add(-q))) && now.Sub(start) < r.maxQueuedPublish() {
			time.AfterFunc(q, check)
			return
		}
		finish(wal.AppendResult{Err: &replicatedError{e: wire.Errorf(wire.CodeUnavailable,
			"%s; the outcome of every publish not yet answered on this stream is unknown: publish them again with their producer_id and sequence to learn it",
			r.noQuorum(t, "did not commit the publish").Message), unknown: true}})
	}
	timer := time.AfterFunc(q, check)
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.Raft.QuorumTimeout)
	defer cancel()
	r.d.ProposeAsync(ctx, t.group, data, func(res replica.Result, err error) {
		timer.Stop()
		if err != nil {
			e, unknown := proposeError(t, err)
			var nl *replica.NotLeaderError
			moved := errors.As(err, &nl) || errors.Is(err, replica.ErrLeadershipMoving) || errors.Is(err, replica.ErrDropped)
			finish(wal.AppendResult{Err: &replicatedError{e: e, unknown: unknown, moved: moved}})
			return
		}
		ar, ok := res.Detail.(*wal.AppendResult)
		if !ok {
			finish(wal.AppendResult{Err: fmt.Errorf("node: topic %q: entry %d applied without a result", topic, res.Index)})
			return
		}
		finish(*ar)
	})
}

// checkBatching turns the driver's batching of proposals (many in one raft entry) on once
// every node of the region announces that it reads batch entries (replica.EnvelopeFeature),
// and off while one does not; asked at most once a second, by every publish.
func (r *replicated) checkBatching() {
	now := time.Now().UnixNano()
	last := r.batchCheck.Load()
	if now-last < int64(time.Second) || !r.batchCheck.CompareAndSwap(last, now) {
		return
	}
	ok, _ := r.n.RegionKnows(features.Envelope, replica.EnvelopeFeature)
	r.d.SetBatching(ok)
}

// proposeError maps a refused or failed proposal to what the client is told; unknown says
// the entry may have been (or may still be) committed.
func proposeError(t *repTopic, err error) (e *wire.Error, unknown bool) {
	var nl *replica.NotLeaderError
	switch {
	case errors.As(err, &nl):
		return wire.Errorf(wire.CodeUnavailable, "topic %q: the leader changed before the publish was proposed (now %s): nothing was appended; retry",
			t.name, cmpOr(t.nameOf(nl.Leader), "unknown")), false
	case errors.Is(err, replica.ErrLeadershipMoving):
		return wire.Errorf(wire.CodeUnavailable, "topic %q: its group's leadership is moving to another replica (a drain, the leader balancer or a stop): nothing was appended; retry", t.name), false
	case errors.Is(err, replica.ErrDropped):
		return wire.Errorf(wire.CodeUnavailable, "topic %q: the leader changed before the publish committed: nothing was appended; retry", t.name), false
	case errors.Is(err, raft.ErrProposalDropped):
		return wire.Errorf(wire.CodeUnavailable, "topic %q: the leader holds too much uncommitted data (its followers are behind): nothing was appended; retry", t.name), false
	case errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, replica.ErrStopped):
		// ProposeAsync's hand-over timed out: the driver never took it.
		return wire.Errorf(wire.CodeUnavailable, "topic %q: the node's raft driver did not take the publish in time: nothing was appended; retry", t.name), false
	case errors.Is(err, replica.ErrStopped), errors.Is(err, context.Canceled):
		// A proposal pending when the driver stopped may have been committed by the others.
		return wire.Errorf(wire.CodeShuttingDown, "node shutting down before the publish to %q was applied here: its outcome is unknown; publish it again with its producer_id and sequence to learn it", t.name), true
	}
	return wire.Errorf(wire.CodeInternal, "topic %q: replicated append failed (%v): its outcome is unknown", t.name, err), true
}

func cmpOr(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

// setPosition stores a durable consumer's position on a replicated topic, with its vector
// (nil: none), through its group (this node must lead it), returning after it is committed
// and applied.
func (r *replicated) setPosition(ctx context.Context, name, topic string, off uint64, vec map[string]uint64) *wire.Error {
	t := r.lookup(topic)
	if t == nil {
		return wire.Errorf(wire.CodeInternal, "topic %q is not a replicated topic", topic)
	}
	ctx, cancel := context.WithTimeout(ctx, r.n.cfg.Raft.QuorumTimeout)
	defer cancel()
	res := r.sm.Propose(ctx, r.d, &replica.WalEntry{Kind: replica.EntrySetPosition, Topic: topic, Name: name, Value: off, Vector: vec})
	if res.Err != nil {
		if errors.Is(res.Err, context.DeadlineExceeded) {
			return r.noQuorum(t, "did not store the consumer's position")
		}
		e, _ := proposeError(t, res.Err)
		return e
	}
	return nil
}

// subscribeOwner decides where a client's subscription to a replicated topic is served:
// "" here (any replica serves reads up to what it applied), or the leader's node for a
// durable consumer (its positions are proposed by the leader).
func (r *replicated) subscribeOwner(ctx context.Context, topic string, durable bool) (string, *wire.Error) {
	if v, outside, e := r.viaVoter(topic); outside {
		return v, e
	}
	t, e := r.ensure(ctx, topic, false)
	if e != nil {
		return "", e
	}
	if !durable && t.local {
		return "", nil
	}
	if !t.local {
		// Placed on other nodes of the region: any replica serves reads, the leader a
		// durable consumer (its positions are proposed there), which this node, outside
		// the topic's group, learns from a replica.
		if !durable {
			return r.viaReplica(t)
		}
		return r.remoteLeader(ctx, t)
	}
	lead, e := r.waitLeader(ctx, t)
	if e != nil {
		return "", e
	}
	if lead == r.id {
		return "", nil
	}
	return t.nameOf(lead), nil
}

// observe reads the raft status of every group this node holds, every ObserveInterval:
// for the metrics, and to tell placement's waiters of a leader change (a subscription
// relayed to an old leader then moves).
func (r *replicated) observe(ctx context.Context) {
	tick := time.NewTicker(r.n.cfg.Raft.ObserveInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			r.mu.Lock()
			r.mu.stopped = true
			r.mu.Unlock()
			return
		case <-tick.C:
		}
		groups := []uint64{metaGroup}
		for _, g := range r.localGroups() {
			groups = append(groups, g.id)
		}
		moved := false
		if m, err := r.d.Membership(ctx, metaGroup); err == nil && len(m.Voters) > 0 {
			r.mu.Lock()
			r.mu.voters, r.mu.learners = m.Voters, m.Learners
			caughtUp := r.mu.outside != nil && m.IsLearner(r.id) && m.Status.Lead != 0 && m.Status.Applied >= m.Status.GetCommit()
			if caughtUp {
				r.mu.outside = nil
				r.notifyLocked()
			}
			r.mu.Unlock()
			if caughtUp {
				r.n.log.Info("this node is a learner of the region's metadata group and has read its placements: it holds the replicas placed on it and serves its topics")
			}
		}
		r.rejoinStep(ctx)
		for _, g := range groups {
			st, err := r.d.Status(ctx, g)
			if err != nil {
				continue
			}
			r.mu.Lock()
			prev := r.mu.status[g]
			r.mu.status[g] = st
			r.mu.Unlock()
			if prev.Lead != st.Lead { // a first leader too: mirrors wait for it (shouldMirror)
				moved = true
			}
			if st.Lead != 0 && st.Lead != r.id {
				if name := r.memberName(st.Lead); name != "" && !r.reachable(name) {
					_ = r.d.WakeLedBy(ctx, st.Lead)
				}
			}
			if st.GetTerm() > prev.GetTerm() && st.Lead != 0 && st.Lead != prev.Lead {
				r.elections.inc(r.groupLabel(g))
			}
		}
		if moved {
			r.n.place.MembersChanged()
		}
	}
}

// groupLabel names a group in metrics: its topic, or "_meta".
func (r *replicated) groupLabel(g uint64) string {
	if g == metaGroup {
		return "_meta"
	}
	r.pl.RLock()
	defer r.pl.RUnlock()
	if grp := r.pl.groups[g]; grp != nil {
		return grp.label
	}
	return strconv.FormatUint(g, 10)
}

// holders returns the leader and replicas of a topic for listings.
func (r *replicated) holders(topic string) (leader string, replicas []string) {
	t := r.lookup(topic)
	if t == nil {
		return "", nil
	}
	if t.local {
		ctx, cancel := context.WithTimeout(context.Background(), r.n.cfg.Raft.ObserveInterval)
		defer cancel()
		if st, err := r.d.Status(ctx, t.group); err == nil {
			return t.nameOf(st.Lead), t.names()
		}
	}
	return r.leaderName(topic), t.names()
}

// wakeFailed wakes the quiet groups led by region nodes gossip does not see alive (a
// gossip event: a failure).
//
// A node restarted empty under its old name comes back with a new raft ID, often before
// gossip has seen its old process die: every quiet group that its old ID led would stay
// quiet and leaderless (its old ID never answers again, and the new member, joining, cannot
// campaign), so the groups led by a raft ID no live member advertises any more wake too.
func (r *replicated) wakeFailed(ctx context.Context) {
	live := map[uint64]bool{}
	for _, m := range r.raftMembers() {
		if !m.alive {
			_ = r.d.WakeLedBy(ctx, m.id)
			continue
		}
		live[m.id] = true
	}
	r.mu.Lock()
	var gone []uint64
	for id := range r.mu.names {
		if !live[id] {
			gone = append(gone, id)
		}
	}
	for _, id := range r.mu.voters { // the metadata group's, named before any topic
		if !live[id] && !slices.Contains(gone, id) {
			gone = append(gone, id)
		}
	}
	r.mu.Unlock()
	for _, id := range gone {
		_ = r.d.WakeLedBy(ctx, id)
	}
}

// raftPeerID is the raft ID a member advertises in gossip (0: none).
func raftPeerID(m gossip.Member) uint64 {
	id, _ := strconv.ParseUint(m.Tags[tagRaft], 10, 64)
	return id
}

// deliverRaft hands a peer's raft messages to the driver (federation's Raft.Deliver).
func (n *Node) deliverRaft(msgs []replica.Message) {
	if r := n.rep; r != nil {
		r.d.Deliver(msgs)
	}
}

// fetchRaft is federation's RaftConfig.Fetch: a peer's catch-up reads records from this
// node's logs of a group, as applied here.
func (n *Node) fetchRaft(group uint64, log string, from, to, maxBytes uint64) ([]byte, uint64, error) {
	r := n.rep
	if r == nil {
		return nil, 0, fmt.Errorf("node %q holds no replicated topics", n.cfg.Name)
	}
	return r.d.ReadChunk(group, log, from, to, maxBytes)
}

// mirrorWanted is federation's Config.MirrorWanted in a replicated region (nil otherwise):
// every topic placed in the region is mirrored in by its leader, whichever node its
// subscribers are on.
func (n *Node) mirrorWanted() func(string) bool {
	if n.raftID == 0 {
		return nil
	}
	return func(topic string) bool { return n.rep != nil && n.rep.isReplicated(topic) }
}

// mirrorAppend is federation's Config.MirrorAppend in a replicated region (nil otherwise):
// a mirror's records and cursor as one raft entry that also compares the cursor.
func (n *Node) mirrorAppend() func(context.Context, federation.MirrorAppend) error {
	if n.raftID == 0 {
		return nil
	}
	return func(ctx context.Context, a federation.MirrorAppend) error {
		r := n.rep
		t := r.lookup(a.Topic)
		if t == nil {
			return fmt.Errorf("node: mirror of %q: not a replicated topic of region %q", a.Topic, n.cfg.Region)
		}
		ctx, cancel := context.WithTimeout(ctx, n.cfg.Raft.QuorumTimeout)
		defer cancel()
		res := r.sm.Propose(ctx, r.d, &replica.WalEntry{Kind: replica.EntryMirrorAppend, Topic: a.Topic, Region: a.Region,
			Name: a.Cursor, HasExpected: a.HasExpected, Expected: a.Expected, Records: a.Records, Value: a.Value})
		if res.Err != nil {
			return fmt.Errorf("node: replicated mirror append of %q: %w", a.Topic, res.Err)
		}
		return nil
	}
}

// shouldMirror reports whether this node mirrors topic into its region: it leads the
// topic's group. A topic not placed yet is placed in the background (a mirror wants it).
// It never blocks (federation's ShouldMirror).
func (r *replicated) shouldMirror(topic string) bool {
	if !r.isReplicated(topic) {
		r.placeLater(topic)
		return false
	}
	return r.leaderName(topic) == r.n.cfg.Name
}

// placeLater has the metadata group place topic, on a goroutine of its own (one per topic
// at a time).
func (r *replicated) placeLater(topic string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.stopped || r.mu.wg == nil || r.mu.placing[topic] || !r.mu.formed {
		return
	}
	r.mu.placing[topic] = true
	ctx := r.mu.ctx
	r.mu.wg.Add(1)
	go func() {
		defer r.mu.wg.Done()
		if _, e := r.ensure(ctx, topic, false); e != nil {
			r.n.log.Debug("placing a topic to mirror", "topic", topic, "err", e.Message)
		}
		r.mu.Lock()
		delete(r.mu.placing, topic)
		r.mu.Unlock()
	}()
}

// holdsAll reports whether this node is one of its region's metadata voters, which hold
// every replicated topic (placement draws replica sets from them): a listing then needs no
// other node. False on a nil receiver.
func (r *replicated) holdsAll() bool {
	if r == nil {
		return false
	}
	r.pl.RLock()
	narrow := r.pl.narrow
	r.pl.RUnlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.formed && len(r.mu.voters) == r.n.cfg.Replicas && len(r.mu.learners) == 0 && narrow == 0 && slices.Contains(r.mu.voters, r.id)
}
