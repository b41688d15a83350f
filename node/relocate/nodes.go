package relocate

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
// a removal is recorded (drain.go, moveremove.go). node/manage serves the endpoints.

// Nodes is the region's nodes as the admin API reads and changes them.
func (r *Relocator) Nodes() manage.Nodes { return regionNodes{r} }

// regionNodes is the Relocator as manage.Nodes.
type regionNodes struct{ r *Relocator }

// Infos lists the region's nodes with replicated topics, by name.
func (a regionNodes) Infos(ctx context.Context) []manage.NodeInfo { return a.r.nodeInfos(ctx) }

// SetDrained asks the region to drain or undrain node name, refusing with the reason what
// cannot be done.
func (a regionNodes) SetDrained(ctx context.Context, name string, drained bool) *wire.Error {
	r := a.r
	known := false
	for _, ni := range r.nodeInfos(ctx) {
		known = known || ni.Name == name
	}
	if !known {
		return wire.Errorf(wire.CodeNotFound, "node %q is not a node of region %q with replicated topics (quicmq nodes lists them)", name, r.cfg.Region)
	}
	if ok, lacking := r.mesh.RegionKnows(features.Meta, DrainVersion); !ok {
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
	r := a.r
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
		return wire.Errorf(wire.CodeNotFound, "node %q is not a node of region %q with replicated topics (quicmq nodes lists them)", name, r.cfg.Region)
	}
	if q, ok := r.moves.removingReq(name); ok {
		if q.dead != dead {
			return wire.Errorf(wire.CodeInUse, "node %q is being removed already (dead: %v)", name, q.dead)
		}
		return nil // asked again: the removal goes on
	}
	if ok, lacking := r.mesh.RegionKnows(features.Meta, MoveVersion); !ok {
		return wire.Errorf(wire.CodeInUse, "removals are recorded in the region's metadata, which these nodes cannot read yet (an older build): %s; upgrade them first",
			strings.Join(lacking, ", "))
	}
	if stays < r.cfg.Replicas {
		return wire.Errorf(wire.CodeInUse, "node %q cannot be removed: region %q would be left with %d nodes, fewer than its %d replicas (--replicas); start another node first",
			name, r.cfg.Region, stays, r.cfg.Replicas)
	}
	if staysUp < r.cfg.Replicas {
		return wire.Errorf(wire.CodeUnavailable, "node %q cannot be removed now: only %d of the nodes that would stay are up, fewer than the %d replicas its groups need (--replicas)",
			name, staysUp, r.cfg.Replicas)
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
func (r *Relocator) nodeInfos(ctx context.Context) []manage.NodeInfo {
	mm := r.meta.Members()
	voters, learners, names := mm.Voters, mm.Learners, mm.Names
	drained := r.drain.drainedSet()
	infos := map[string]*manage.NodeInfo{}
	info := func(name string) *manage.NodeInfo {
		if infos[name] == nil {
			infos[name] = &manage.NodeInfo{Name: name, Role: "none", Moves: []manage.MoveInfo{}, Local: name == r.cfg.Name}
		}
		return infos[name]
	}
	nameOf := func(id uint64) string {
		if nm := r.mesh.MemberName(id); nm != "" {
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
	for _, m := range r.mesh.RaftMembers() {
		info(m.Name)
	}
	if r.mesh.Gossip() {
		for _, m := range r.mesh.RegionMembers() {
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
	if ro, ok := r.d.Role(MetaGroup); ok && ro.Lead != 0 {
		if nm := nameOf(ro.Lead); nm != "" {
			info(nm).MetaLeader = true
		}
	}
	seen, all := r.countGroups(info, nameOf)
	for name, ni := range infos {
		ni.Led = seen[name]
		if c, err := strconv.Atoi(tags[name]); err == nil && !all && name != r.cfg.Name {
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
func (r *Relocator) countGroups(info func(string) *manage.NodeInfo, nameOf func(uint64) string) (led map[string]int, all bool) {
	all = true
	var local []uint64
	for _, g := range r.meta.Groups() {
		for _, m := range g.Replicas {
			info(m.Name).Held++
		}
		if g.Local {
			local = append(local, g.ID)
		} else {
			all = false
		}
	}
	led = map[string]int{}
	for _, g := range local {
		if ro, ok := r.d.Role(g); ok && ro.Lead != 0 {
			if nm := nameOf(ro.Lead); nm != "" {
				led[nm]++
			}
		}
	}
	return led, all
}

// nodeState is node name's state as `quicmq nodes` shows it, and whether it is being
// removed as dead.
func (r *Relocator) nodeState(name string, drained map[string]bool) (state string, dead bool) {
	q, removing := r.moves.removingReq(name)
	switch {
	case removing:
		return "removing", q.dead
	case drained[name]:
		return "draining", false
	case name == r.cfg.Name || r.mesh.Gossip() && r.mesh.MemberStatus(name) == gossip.StatusAlive:
		return "up", false
	}
	return "down", false
}
