package relocate

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/node/features"
	"github.com/quicmq/quicmq/routing"
)

// The replica balancer and the replacement of nodes down too long (issue 30;
// docs/architecture.md, "Moving replicas").
//
// Both run on the metadata leader in MoveLoop's goroutine and only start moves, as
// removals do (move.go): a start record names the group, its old and its new node, and
// the group's leader carries it out (learner, catch up, promote with the old one removed,
// replica.MoveStep). Neither needs a record kind of its own.
//
//   - Balancing (planBalance): while no node is being removed, the leader plans with
//     routing.PlanBalance from the metadata's placement and moves in progress and gossip's
//     view of who is up, and proposes a start record for each move planned: at most
//     Raft.Moves in progress in the region, until every node that is up, a member of the
//     metadata group, not drained and not being removed holds within one of the others. The
//     plan is re-derived on every round from the records, so a new leader carries on where
//     the old one stopped, and a recorded move is never planned twice.
//   - Replacement (replaceDown): every node notes, on every round, since when each member
//     of the metadata group has been seen down; the leader asks the removal as dead of a
//     node down longer than Raft.ReplaceAfter, one node at a time, when the region keeps
//     at least Replicas nodes without it and it is not drained (draining is what an
//     operator does before maintenance; the request is the one 'quicmq nodes remove
//     --dead' makes, recorded by recordRemoveRequests).

// balancer is what MoveLoop's goroutine keeps for balancing and replacement.
type balancer struct {
	downSince map[string]time.Time // metadata member name -> first seen down, this run
	refused   map[string]bool      // a replacement refused (too few nodes would stay): logged once
	m         *balanceMetrics
}

type balanceMetrics struct {
	planned   prometheus.Counter
	replaced  prometheus.Counter
	imbalance prometheus.Gauge
}

func (b *balancer) init(reg prometheus.Registerer) {
	b.downSince, b.refused = map[string]time.Time{}, map[string]bool{}
	b.m = &balanceMetrics{
		planned: prometheus.NewCounter(prometheus.CounterOpts{Name: "quicmq_raft_balance_moves_total",
			Help: "Replica moves the replica balancer started while this node led the region's metadata group (a node that joined takes its share of the groups)."}),
		replaced: prometheus.NewCounter(prometheus.CounterOpts{Name: "quicmq_nodes_replaced_total",
			Help: "Nodes this node, leading the region's metadata group, asked to remove as dead because they had been down longer than --replace-after."}),
		imbalance: prometheus.NewGauge(prometheus.GaugeOpts{Name: "quicmq_raft_replica_imbalance",
			Help: "The most raft groups a node holds a replica of minus the fewest, over the region's nodes that are up, not drained and not being removed, as this node's copy of the metadata says (moves in progress counted done; 0 or 1: balanced)."}),
	}
	reg.MustRegister(b.m.planned, b.m.replaced, b.m.imbalance)
}

// balanceInputs gathers PlanBalance's arguments: the region's nodes with a raft ID, the
// groups as placed, the moves in progress; ids maps a node's name to its raft ID.
func (r *Relocator) balanceInputs() (nodes []routing.BalanceNode, groups []routing.GroupHolding, moving []routing.Move, ids map[string]uint64) {
	members := r.meta.Members().All()
	drained := r.drain.drainedSet()
	ids = map[string]uint64{}
	for _, m := range r.mesh.RaftMembers() {
		member := slices.Contains(members, m.ID)
		nodes = append(nodes, routing.BalanceNode{ID: m.Name, Up: m.Alive, Balanced: member && !drained[m.Name] && !r.moves.gone(m.Name)})
		ids[m.Name] = m.ID
	}
	byID := map[uint64]string{}
	for _, n := range nodes {
		byID[ids[n.ID]] = n.ID
	}
	for _, g := range r.meta.Groups() {
		// The leader as this node's raft knows it, for the groups it holds (a hint: the
		// planner moves a replica that does not lead first).
		lead := ""
		if ro, ok := r.d.Role(g.ID); ok && ro.Lead != 0 {
			lead = byID[ro.Lead]
		}
		groups = append(groups, routing.GroupHolding{ID: g.ID, Replicas: g.Names(), Leader: lead})
	}
	moves := r.moves.movesCopy()
	for _, g := range slices.Sorted(maps.Keys(moves)) {
		gm := moves[g]
		moving = append(moving, routing.Move{Group: g, From: gm.from, To: gm.to})
	}
	return nodes, groups, moving, ids
}

// setReplicaImbalance sets quicmq_raft_replica_imbalance from the metadata (every node, every
// round).
func (r *Relocator) setReplicaImbalance() {
	nodes, groups, moving, _ := r.balanceInputs()
	held := map[string]int{}
	for _, n := range nodes {
		if n.Up && n.Balanced {
			held[n.ID] = 0
		}
	}
	for _, g := range groups {
		reps := slices.Clone(g.Replicas)
		for _, mv := range moving {
			if mv.Group == g.ID {
				if i := slices.Index(reps, mv.From); i >= 0 {
					reps[i] = mv.To
				}
			}
		}
		for _, nm := range reps {
			if _, ok := held[nm]; ok {
				held[nm]++
			}
		}
	}
	lo, hi, first := 0, 0, true
	for _, c := range held {
		if first || c < lo {
			lo = c
		}
		if first || c > hi {
			hi = c
		}
		first = false
	}
	r.bal.m.imbalance.Set(float64(hi - lo))
}

// planBalance, on the metadata leader, starts the moves routing.PlanBalance asks for, and
// waits until this node has applied their records, so that its next round counts them.
func (r *Relocator) planBalance(ctx context.Context) {
	c := r.cfg.Settings
	if c.DisableReplicaBalance {
		return
	}
	// A node of an older build would skip the start record (meta=5, move.go) and hold
	// another placement than the others.
	if ok, _ := r.mesh.RegionKnows(features.Meta, MoveVersion); !ok {
		return
	}
	// A metadata leader newly elected may not have read the start records its predecessor
	// committed: it plans once it has read everything committed (the moves in progress are
	// then all counted, and Raft.Moves holds across the change).
	if !r.meta.ReadAll(ctx) {
		return
	}
	nodes, groups, moving, ids := r.balanceInputs()
	plan := routing.PlanBalance(nodes, groups, moving, c.Moves)
	if len(plan) == 0 {
		return
	}
	fromIDs := make([]uint64, len(plan))
	for i, mv := range plan {
		if g, ok := r.meta.Group(mv.Group); ok {
			if j := slices.IndexFunc(g.Replicas, func(m Replica) bool { return m.Name == mv.From }); j >= 0 {
				fromIDs[i] = g.Replicas[j].ID
			}
		}
	}
	var last uint64
	proposed := false
	for i, mv := range plan {
		if fromIDs[i] == 0 || ids[mv.To] == 0 {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, c.QuorumTimeout)
		res, err := r.d.Propose(pctx, MetaGroup, encodeMove(moveRec{kind: moveKindStart, group: mv.Group, from: mv.From, fromID: fromIDs[i], to: mv.To, toID: ids[mv.To]}))
		cancel()
		if err != nil {
			r.log.Warn("recording a replica move of the balancer in the region's metadata", "group", mv.Group, "from", mv.From, "to", mv.To, "err", err)
			break
		}
		r.log.Info("balancing replicas: moving a group's replica to a node that holds fewer", "group", mv.Group, "from", mv.From, "to", mv.To)
		r.bal.m.planned.Inc()
		last, proposed = res.Offset, true
	}
	if proposed {
		wctx, cancel := context.WithTimeout(ctx, c.QuorumTimeout)
		r.meta.WaitRead(wctx, last)
		cancel()
	}
}

// noteDown records since when each member of the metadata group has been seen down (every
// node, every round, so that a node that becomes the metadata leader knows it already).
func (r *Relocator) noteDown(now time.Time) {
	seen := map[string]bool{}
	for _, name := range r.metaMemberNames() {
		if name == "" || name == r.cfg.Name {
			continue
		}
		seen[name] = true
		if r.mesh.MemberStatus(name) == gossip.StatusAlive {
			delete(r.bal.downSince, name)
			delete(r.bal.refused, name)
		} else if _, ok := r.bal.downSince[name]; !ok {
			r.bal.downSince[name] = now
		}
	}
	for name := range r.bal.downSince {
		if !seen[name] {
			delete(r.bal.downSince, name)
		}
	}
}

// metaMemberNames names the members of the metadata group: by the metadata's names, or
// gossip's for a learner that holds no group yet; a member named by neither is left out.
func (r *Relocator) metaMemberNames() []string {
	mm := r.meta.Members()
	members, names := mm.All(), mm.Names
	var out []string
	for _, id := range members {
		nm := names[id]
		if nm == "" {
			nm = r.mesh.MemberName(id)
		}
		if nm != "" {
			out = append(out, nm)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// replaceDown, on the metadata leader, asks the removal as dead of the node down longest,
// when that is longer than Raft.ReplaceAfter, it is not drained and no node is being
// removed.
func (r *Relocator) replaceDown(ctx context.Context, now time.Time) {
	after := r.cfg.Settings.ReplaceAfter
	if after <= 0 {
		return
	}
	if ok, _ := r.mesh.RegionKnows(features.Meta, MoveVersion); !ok {
		return // as planBalance
	}
	mv := &r.moves
	mv.mu.Lock()
	busy := len(mv.mu.removing) > 0 || len(mv.mu.want) > 0
	mv.mu.Unlock()
	if busy {
		return
	}
	victim := ""
	for _, name := range slices.Sorted(maps.Keys(r.bal.downSince)) {
		since := r.bal.downSince[name]
		// A drained node is down for maintenance its operator announced: never replaced.
		if now.Sub(since) >= after && !mv.gone(name) && !r.drain.isDrained(name) && (victim == "" || since.Before(r.bal.downSince[victim])) {
			victim = name
		}
	}
	if victim == "" {
		return
	}
	stays := 0
	for _, nm := range r.metaMemberNames() {
		if nm != victim && !mv.gone(nm) {
			stays++
		}
	}
	down := now.Sub(r.bal.downSince[victim]).Round(time.Second)
	if stays < r.cfg.Replicas {
		if !r.bal.refused[victim] {
			r.log.Warn("a node has been down longer than --replace-after, but the region would keep fewer nodes than its replicas without it: not replaced",
				"node", victim, "down", down, "stays", stays, "replicas", r.cfg.Replicas)
			r.bal.refused[victim] = true
		}
		return
	}
	r.log.Warn("a node has been down longer than --replace-after: removing it as dead, its replicas re-created on the other nodes",
		"node", victim, "down", down, "replace_after", after)
	r.bal.m.replaced.Inc()
	r.requestRemove(ctx, victim, true)
}

// startMoveBytes notes group's catch-up bytes when a move of its replica onto this node
// starts (the node's metadata reader, before the group opens here).
func (r *Relocator) startMoveBytes(ctx context.Context, group uint64) {
	b, err := r.d.CatchupBytes(ctx, group)
	if err != nil {
		return
	}
	mv := &r.moves
	mv.mu.Lock()
	mv.mu.fetched[group] = [2]uint64{b, 0}
	mv.mu.Unlock()
}

// countMoveBytes adds to quicmq_raft_move_bytes_total what group's catch-ups fetched since
// they were last counted, while its replica moves onto this node.
func (r *Relocator) countMoveBytes(ctx context.Context, group uint64) {
	b, err := r.d.CatchupBytes(ctx, group)
	if err != nil {
		return
	}
	mv := &r.moves
	mv.mu.Lock()
	defer mv.mu.Unlock()
	f, ok := mv.mu.fetched[group]
	if !ok || b < f[0]+f[1] {
		return
	}
	mv.m.bytes.Add(float64(b - f[0] - f[1]))
	mv.mu.fetched[group] = [2]uint64{f[0], b - f[0]}
}

// countMovesBytes counts the catch-up bytes of every move onto this node (MoveLoop).
func (r *Relocator) countMovesBytes(ctx context.Context) {
	r.moves.mu.Lock()
	groups := slices.Collect(maps.Keys(r.moves.mu.fetched))
	r.moves.mu.Unlock()
	for _, g := range groups {
		r.countMoveBytes(ctx, g)
	}
}
