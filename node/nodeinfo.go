package node

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/features"
	"github.com/quicmq/quicmq/node/manage"
)

// The region's nodes with replicated topics as the admin API shows and changes them
// (manage.Nodes: GET /v1/nodes, POST /v1/nodes/{name}/drain, /undrain and /remove): read from
// the replicated path's own state (the metadata group's members, the placements, the
// drains and moves in progress, the gossip tags), and checked against it before a drain or
// a removal is recorded (drain.go, moveremove.go). So it stays with the replicated path;
// node/manage serves the endpoints.

// regionNodes is the replicated path as manage.Nodes.
type regionNodes struct{ r *replicated }

// Infos lists the region's nodes with replicated topics, by name.
func (a regionNodes) Infos(ctx context.Context) []manage.NodeInfo { return a.r.nodeInfos(ctx) }

// SetDrained asks the region to drain or undrain node name, refusing with the reason what
// cannot be done.
func (a regionNodes) SetDrained(ctx context.Context, name string, drained bool) *wire.Error {
	r, n := a.r, a.r.n
	known := false
	for _, ni := range r.nodeInfos(ctx) {
		known = known || ni.Name == name
	}
	if !known {
		return wire.Errorf(wire.CodeNotFound, "node %q is not a node of region %q with replicated topics (quicmq nodes lists them)", name, n.cfg.Region)
	}
	if ok, lacking := n.RegionKnows(features.Meta, drainVersion); !ok {
		return wire.Errorf(wire.CodeInUse, "draining is recorded in the region's metadata, which these nodes cannot read yet (an older build): %s; upgrade them first",
			strings.Join(lacking, ", "))
	}
	if drained {
		if b := r.drainBlockers(name); len(b) > 0 {
			return wire.Errorf(wire.CodeInUse, "node %q cannot be drained: no other replica that is up and not drained could lead %s",
				name, strings.Join(b, "; "))
		}
	}
	if err := r.requestDrain(ctx, name, drained); err != nil {
		return wire.Errorf(wire.CodeUnavailable, "%v", err)
	}
	return nil
}

// Remove asks the region to remove node name (move.go), refusing with the reason what
// cannot be done: the region would be left with fewer nodes than Replicas, or the node's
// state does not match dead (a node that is down cannot hand its replicas over; one that
// is up is not dead).
func (a regionNodes) Remove(ctx context.Context, name string, dead bool) *wire.Error {
	r, n := a.r, a.r.n
	var target *manage.NodeInfo
	infos := r.nodeInfos(ctx)
	stays, staysUp := 0, 0
	for i, ni := range infos {
		if ni.Name == name {
			target = &infos[i]
			continue
		}
		if ni.State == "removing" || ni.Role == "none" || r.moves.wanted(ni.Name) {
			continue
		}
		stays++
		if ni.State != "down" {
			staysUp++
		}
	}
	if target == nil || r.moves.isRemoved(name) {
		return wire.Errorf(wire.CodeNotFound, "node %q is not a node of region %q with replicated topics (quicmq nodes lists them)", name, n.cfg.Region)
	}
	if q, ok := r.moves.removingReq(name); ok {
		if q.dead != dead {
			return wire.Errorf(wire.CodeInUse, "node %q is being removed already (dead: %v)", name, q.dead)
		}
		return nil // asked again: the removal goes on
	}
	if ok, lacking := n.RegionKnows(features.Meta, moveVersion); !ok {
		return wire.Errorf(wire.CodeInUse, "removals are recorded in the region's metadata, which these nodes cannot read yet (an older build): %s; upgrade them first",
			strings.Join(lacking, ", "))
	}
	if stays < n.cfg.Replicas {
		return wire.Errorf(wire.CodeInUse, "node %q cannot be removed: region %q would be left with %d nodes, fewer than its %d replicas (--replicas); start another node first",
			name, n.cfg.Region, stays, n.cfg.Replicas)
	}
	if staysUp < n.cfg.Replicas {
		return wire.Errorf(wire.CodeUnavailable, "node %q cannot be removed now: only %d of the nodes that would stay are up, fewer than the %d replicas its groups need (--replicas)",
			name, staysUp, n.cfg.Replicas)
	}
	switch down := target.State == "down"; {
	case down && !dead:
		return wire.Errorf(wire.CodeUnavailable, "node %q is down: its replicas cannot be handed over by it; if it will not come back, remove it with --dead (its groups are re-replicated from the other replicas)", name)
	case !down && dead:
		return wire.Errorf(wire.CodeInUse, "node %q is up: --dead is for a node that will not come back; remove it without --dead (its replicas are moved off it first)", name)
	}
	r.requestRemove(ctx, name, dead)
	return nil
}

// nodeInfos lists the region's nodes with replicated topics, by name.
func (r *replicated) nodeInfos(ctx context.Context) []manage.NodeInfo {
	n := r.n
	r.mu.Lock()
	voters, learners := slices.Clone(r.mu.voters), slices.Clone(r.mu.learners)
	names := maps.Clone(r.mu.names)
	r.mu.Unlock()
	drained := r.drain.drainedSet()
	infos := map[string]*manage.NodeInfo{}
	info := func(name string) *manage.NodeInfo {
		if infos[name] == nil {
			infos[name] = &manage.NodeInfo{Name: name, Role: "none", Moves: []manage.MoveInfo{}, Local: name == n.cfg.Name}
		}
		return infos[name]
	}
	nameOf := func(id uint64) string {
		if nm := r.memberName(id); nm != "" {
			return nm
		}
		return names[id]
	}
	for _, id := range voters {
		if nm := nameOf(id); nm != "" {
			info(nm).Role = "voter"
		}
	}
	for _, id := range learners {
		if nm := nameOf(id); nm != "" {
			info(nm).Role = "learner"
		}
	}
	tags := map[string]string{}
	bytes := map[string]map[uint64]uint64{}
	for _, m := range r.raftMembers() {
		info(m.name)
	}
	if n.gossip != nil {
		for _, m := range n.gossip.RegionMembers(n.cfg.Region) {
			if v, ok := m.Tags[tagLeads]; ok {
				tags[m.Name] = v
			}
			bytes[m.Name] = parseMoveBytes(m.Tags[tagMoveBytes])
		}
	}
	for name := range drained {
		info(name)
	}
	moves := r.moveInfos(bytes)
	for name := range moves {
		info(name)
	}
	if ro, ok := r.d.Role(metaGroup); ok && ro.Lead != 0 {
		if nm := nameOf(ro.Lead); nm != "" {
			info(nm).MetaLeader = true
		}
	}
	seen, all := r.countGroups(info, nameOf)
	for name, ni := range infos {
		ni.Led = seen[name]
		if c, err := strconv.Atoi(tags[name]); err == nil && !all && name != n.cfg.Name {
			ni.Led = c
		}
		if mi := moves[name]; mi != nil {
			ni.Moves = mi
		}
		ni.State, ni.Dead = r.nodeState(name, drained)
	}
	out := make([]manage.NodeInfo, 0, len(infos))
	for _, name := range slices.Sorted(maps.Keys(infos)) {
		if r.moves.isRemoved(name) && infos[name].Held == 0 {
			continue // removed: no longer a node of the region
		}
		out = append(out, *infos[name])
	}
	return out
}

// countGroups counts, per node, the groups it holds (from the placements) and those it leads
// as this node sees its own groups' leaders (led), which is exact when this node holds every
// group (all).
func (r *replicated) countGroups(info func(string) *manage.NodeInfo, nameOf func(uint64) string) (led map[string]int, all bool) {
	r.pl.RLock()
	all = true
	var local []*repGroup
	for _, g := range r.pl.groups {
		for _, m := range g.replicas {
			info(m.name).Held++
		}
		if g.local {
			local = append(local, g)
		} else {
			all = false
		}
	}
	r.pl.RUnlock()
	led = map[string]int{}
	for _, g := range local {
		if ro, ok := r.d.Role(g.id); ok && ro.Lead != 0 {
			if nm := nameOf(ro.Lead); nm != "" {
				led[nm]++
			}
		}
	}
	return led, all
}

// nodeState is node name's state as `quicmq nodes` shows it, and whether it is being
// removed as dead.
func (r *replicated) nodeState(name string, drained map[string]bool) (state string, dead bool) {
	n := r.n
	q, removing := r.moves.removingReq(name)
	switch {
	case removing:
		return "removing", q.dead
	case drained[name]:
		return "draining", false
	case name == n.cfg.Name || n.gossip != nil && n.place.MemberStatus(name) == gossip.StatusAlive:
		return "up", false
	}
	return "down", false
}
