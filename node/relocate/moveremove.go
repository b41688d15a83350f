package relocate

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/replica"
)

// Removing a node from the region: the request (from the admin API, or --replace-after),
// announced and recorded by the metadata leader, and the node's leaving the metadata group
// once its replicas moved.

// removeReq is a request to remove a node, made at time at (Unix nanoseconds).
type removeReq struct {
	dead bool
	at   int64
}

// requestRemove asks the region to remove node name: at once when this node leads the
// metadata group, and otherwise through tagRemoveReq. It returns once the request is made.
func (r *Relocator) requestRemove(ctx context.Context, name string, dead bool) {
	mv := &r.moves
	q := removeReq{dead: dead, at: time.Now().UnixNano()}
	mv.mu.Lock()
	q.at = max(q.at, mv.mu.at[name]+1)
	mv.mu.want[name] = q
	mv.mu.Unlock()
	if ro, ok := r.d.Role(MetaGroup); ok && ro.Leader {
		pctx, cancel := context.WithTimeout(ctx, r.cfg.Settings.QuorumTimeout)
		defer cancel()
		if _, err := r.d.Propose(pctx, MetaGroup, encodeMove(moveRec{kind: moveKindRemove, name: name, dead: dead, at: q.at})); err == nil {
			return
		}
	}
	select {
	case mv.wake <- struct{}{}:
	default:
	}
}

func (r *Relocator) announceRemoveRequests() {
	mv := &r.moves
	mv.mu.Lock()
	var items []string
	for _, name := range slices.Sorted(maps.Keys(mv.mu.want)) {
		q := mv.mu.want[name]
		if mv.mu.at[name] >= q.at {
			delete(mv.mu.want, name)
			continue
		}
		items = append(items, name+"="+map[bool]string{false: "L", true: "D"}[q.dead]+"@"+strconv.FormatInt(q.at, 10))
	}
	mv.mu.Unlock()
	r.announceReqTag(tagRemoveReq, strings.Join(items, ","), &mv.reqTag, "remove requests")
}

// parseRemoveReq reads a tagRemoveReq value ("L": the node leaves, "D": it is dead);
// malformed items are skipped.
func parseRemoveReq(s string) map[string]removeReq {
	out := map[string]removeReq{}
	parseReqTag(s, "L", "D", func(name string, dead bool, at int64) { out[name] = removeReq{dead: dead, at: at} })
	return out
}

// recordRemoveRequests, on the metadata leader, proposes a remove record for every request
// a live node announces that the metadata does not show yet.
func (r *Relocator) recordRemoveRequests(ctx context.Context) {
	reqs := map[string]removeReq{}
	add := func(m map[string]removeReq) {
		for name, q := range m {
			if q.at > reqs[name].at {
				reqs[name] = q
			}
		}
	}
	for _, m := range r.mesh.RegionMembers() {
		if m.Status == gossip.StatusAlive || m.Name == r.cfg.Name {
			add(parseRemoveReq(m.Tags[tagRemoveReq]))
		}
	}
	mv := &r.moves
	mv.mu.Lock()
	add(mv.mu.want)
	applied := maps.Clone(mv.mu.at)
	mv.mu.Unlock()
	mm := r.meta.Members()
	members, names := mm.All(), mm.Names
	for _, name := range slices.Sorted(maps.Keys(reqs)) {
		q := reqs[name]
		if q.at <= applied[name] {
			continue
		}
		// The asking node checked this against what it knew; two nodes asked at once may
		// each have counted the other's node as staying.
		stays := 0
		for _, id := range members {
			nm := names[id]
			if nm == "" {
				nm = r.mesh.MemberName(id) // a learner that holds no group yet
			}
			if nm != "" && nm != name && !mv.gone(nm) {
				stays++
			}
		}
		if _, ok := mv.removingReq(name); !ok && !mv.isRemoved(name) && stays < r.cfg.Replicas {
			r.log.Warn("refusing a node's removal: the region would keep fewer nodes than its replicas", "node", name, "stays", stays, "replicas", r.cfg.Replicas)
			continue
		}
		if !r.proposeMove(ctx, moveRec{kind: moveKindRemove, name: name, dead: q.dead, at: q.at}) {
			return
		}
	}
}

// leaveMeta takes the next step of node name (raft ID id) leaving the metadata group: a
// voter hands its vote to a caught-up learner (one joint change), a learner is removed,
// and a node outside the group is recorded removed.
func (r *Relocator) leaveMeta(ctx context.Context, name string, id uint64) {
	m, err := r.d.Membership(ctx, MetaGroup)
	if err != nil || m.Match == nil || m.Joint() {
		return
	}
	if id == 0 {
		id = r.nameToID(name)
	}
	switch {
	case id == r.id:
		// This node leads the metadata group and leaves it: DrainLoop hands the
		// leadership away (a removing node is treated as drained).
		return
	case m.IsVoter(id):
		var best uint64
		for _, gm := range r.mesh.RaftMembers() {
			if gm.Alive && m.IsLearner(gm.ID) && !r.moves.gone(gm.Name) && m.Match[gm.ID]+r.cfg.Settings.CaughtUp >= m.Status.GetCommit() {
				best = gm.ID
				break
			}
		}
		var cc = replica.RemoveMember(id)
		if best != 0 {
			cc = replica.PromoteAndRemove(best, id)
		} else if len(m.Voters) <= r.cfg.Replicas {
			r.log.Info("a node being removed votes in the metadata group and no learner is caught up to take its vote yet", "node", name)
			return
		}
		if err := r.d.ProposeConfChange(ctx, MetaGroup, cc); err != nil {
			r.log.Warn("membership change of the metadata group refused", "node", name, "err", err)
			return
		}
		r.log.Info("membership change: a node being removed leaves the metadata group's voters", "node", name, "raft_id", id, "promoted", best)
	case m.IsLearner(id):
		if err := r.d.ProposeConfChange(ctx, MetaGroup, replica.RemoveMember(id)); err != nil {
			r.log.Warn("membership change of the metadata group refused", "node", name, "err", err)
			return
		}
		r.log.Info("membership change: a node being removed leaves the metadata group", "node", name, "raft_id", id)
	default:
		r.proposeMove(ctx, moveRec{kind: moveKindRemoved, name: name})
	}
}

func (r *Relocator) nameToID(name string) uint64 {
	for _, gm := range r.mesh.RaftMembers() {
		if gm.Name == name {
			return gm.ID
		}
	}
	return 0
}
