package node

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3"

	"github.com/quicmq/quicmq/node/relocate"
	"github.com/quicmq/quicmq/replica"
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
	// predicted counts first publishes relayed before their placement was read here
	// (replpredict.go).
	predicted atomic.Int64
	// awaiters counts the publish batches that waited on a goroutine of their own (the
	// publisher's awaiter) rather than parked (replpark.go): for tests.
	awaiters atomic.Int64
	// unparked counts the batches of topics not placed here that waited on an awaiter
	// because park refused them (or parking was off): for tests. A placed topic's batches
	// still wait on one behind its earlier batches or a leadership move, which a loaded
	// machine makes more often; they are not counted here.
	unparked atomic.Int64
	// batchCheck is when checkBatching last asked the region (Unix nanoseconds).
	batchCheck atomic.Int64
	// appliedAt is, by group, when it last applied entries here (*atomic.Int64, Unix
	// nanoseconds): a publish waiting in a group that progresses is not timed out (propose).
	appliedAt sync.Map
	// proposals and relays check, one timer each for all, a publish proposed here or
	// relayed to a leader that has not been answered within QuorumTimeout (or one and a
	// half): propose, relayStream.send.
	proposals, relays *watchdog

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
		// changed, when not nil, is closed by the next placement: the metadata leader's
		// batched asks wait on it (placeAll), one channel for every topic they wait for.
		changed chan struct{}
	}

	// parked: topics publish streams wait for the placement of, released by its apply
	// (replpark.go); a lock of its own, taken after any other of the node's.
	parked struct {
		sync.Mutex
		m       map[string]*parkedTopic
		order   []*parkedTopic // in the order parked (their deadlines' order)
		stopped bool
		wake    chan struct{} // capacity 1: parkWatch has a topic to look after
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
	// reloc: drained nodes, leader hand-offs and balance, nodes being removed, replica
	// moves, the replica balancer and replacements (node/relocate; relocate.go).
	reloc *relocate.Relocator
	// rerouted counts publishes routed again to a group's new leader (publishorder.go).
	rerouted prometheus.Counter

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
	q := n.cfg.Raft.QuorumTimeout
	r.proposals, r.relays = newWatchdog(q), newWatchdog(q+q/2)
	r.pl.topics = make(map[string]uint64)
	r.pl.groups = make(map[uint64]*repGroup)
	r.pl.many = make(map[int][]uint64)
	r.ask.wake = make(chan struct{}, 1)
	r.parked.wake = make(chan struct{}, 1)
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
		Now: n.cfg.Now, Logger: n.log.With("raft_id", id), Timeline: n.cfg.Timeline,
	})
	if err != nil {
		return nil, fmt.Errorf("node: replicated topics: %w", err)
	}
	r.elections = newElectionCounter(n.reg, n.cfg.MaxSeriesPerMetric)
	r.rejoinM = newRejoinMetrics(n.reg)
	r.reloc = newRelocator(r)
	r.rerouted = prometheus.NewCounter(prometheus.CounterOpts{Name: "quicmq_publish_rerouted_total",
		Help: "Publishes routed again by this node to a raft group's new leader instead of being refused to the client: the group refused them before appending them because its leadership moved (a drain, the balancer, a stop, an election), or the node that relayed them here leads the group now."})
	n.reg.MustRegister(r.rerouted)
	r.rejoin = rejoinState{silentSince: map[[2]uint64]time.Time{}, last: map[[2]uint64]replica.ReplaceState{}, learnerAt: map[[2]uint64]time.Time{}}
	n.reg.MustRegister(&raftCollector{r: r})
	return r, nil
}

// start runs the driver and the goroutines of replicated topics on wg until ctx ends.
func (r *replicated) start(ctx context.Context, wg *sync.WaitGroup) {
	r.mu.Lock()
	r.mu.ctx, r.mu.wg = ctx, wg
	r.mu.Unlock()
	starts := []func(context.Context){
		r.placer,          // replgroups.go
		r.asker,           // replask.go
		r.parkWatch,       // replpark.go
		r.reloc.DrainLoop, // node/relocate
		r.reloc.MoveLoop,
		r.retain, // replretain.go
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

// placed reports whether topic is placed (what lookup(topic) != nil says, without building
// the placement: the publish path asks it several times for each new topic, on every node).
func (r *replicated) placed(topic string) bool {
	r.pl.RLock()
	defer r.pl.RUnlock()
	_, ok := r.pl.topics[topic]
	return ok
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
func (r *replicated) isReplicated(topic string) bool { return r.placed(topic) }

// serving reports whether the region's metadata group has a leader, which placing a new
// topic needs (Node.Serving). A node without a replicated part (nil) serves as it runs.
func (r *replicated) serving() bool {
	if r == nil {
		return true
	}
	ro, ok := r.d.Role(metaGroup)
	return ok && ro.Lead != 0
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
