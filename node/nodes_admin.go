package node

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/features"
	"github.com/quicmq/quicmq/node/manage"
)

// NodeInfo is one node of the region in the admin API (GET /v1/nodes), as this node sees
// it: its role in the region's metadata group, its state, the data groups it holds and
// leads, and the moves of replicas in progress that involve it.
type NodeInfo struct {
	Name string `json:"name"`
	// Role is "voter" or "learner" in the region's metadata group ("none" while it is
	// outside it: a node that has not joined yet).
	Role string `json:"role"`
	// State is "up", "down" (gossip does not see it alive), "draining" (drained: it leads
	// nothing until undrained, whether or not it is up) or "removing" (nodes remove: its
	// replicas move to other nodes, then it leaves the metadata group and is no longer
	// listed).
	State string `json:"state"`
	Held  int    `json:"held"` // data groups it holds a replica of
	// Led is the number of data groups it leads: counted from this node's groups when it
	// holds every group, and otherwise as the node announces it in gossip.
	Led        int        `json:"led"`
	MetaLeader bool       `json:"meta_leader"`    // it leads the region's metadata group
	Moves      []MoveInfo `json:"moves"`          // moves in progress from or to it
	Dead       bool       `json:"dead,omitempty"` // removing: with --dead (its replicas are re-created from the others)
	Local      bool       `json:"local"`          // the node answering
}

// MoveInfo is a move of a group's replica in progress (move.go).
type MoveInfo struct {
	Group string `json:"group"`
	From  string `json:"from"`
	To    string `json:"to"`
	// State is the group leader's last step ("add learner", "catching up", "promote and
	// remove", ...) as the answering node knows it: "started" when it does not lead the group.
	State string `json:"state"`
	// Entries is the new replica's raft match index and Of the group's commit index, when
	// the answering node leads the group (0 otherwise).
	Entries uint64 `json:"entries"`
	Of      uint64 `json:"of"`
	// Bytes is what the new replica's node fetched so far of the records its catch-up
	// needed (as it announces it in gossip; quicmq_raft_move_bytes_total counts the same).
	Bytes uint64 `json:"bytes"`
}

// nodesRoutes adds the region's node endpoints to the admin API: GET /v1/nodes, and POST
// /v1/nodes/{name}/drain and /undrain (state-changing: Config.AdminAPI).
func (n *Node) nodesRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/nodes", func(w http.ResponseWriter, r *http.Request) {
		if n.rep == nil {
			manage.WriteError(w, wire.Errorf(wire.CodeInvalidArgument, "node %q keeps single-copy topics (--replicas 1): it has no raft groups, nothing to list", n.cfg.Name))
			return
		}
		manage.WriteJSON(w, n.rep.nodeInfos(r.Context()))
	})
	drain := func(drained bool) http.HandlerFunc {
		return n.stateChanging(func(w http.ResponseWriter, r *http.Request) {
			if e := n.setDrained(r.Context(), r.PathValue("name"), drained); e != nil {
				manage.WriteError(w, e)
				return
			}
			for _, ni := range n.rep.nodeInfos(r.Context()) {
				if ni.Name == r.PathValue("name") {
					manage.WriteJSON(w, ni)
					return
				}
			}
			manage.WriteJSON(w, NodeInfo{Name: r.PathValue("name"), Moves: []MoveInfo{}})
		})
	}
	mux.HandleFunc("POST /v1/nodes/{name}/drain", drain(true))
	mux.HandleFunc("POST /v1/nodes/{name}/undrain", drain(false))
	mux.HandleFunc("POST /v1/nodes/{name}/remove", n.stateChanging(func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if e := n.remove(r.Context(), name, r.URL.Query().Get("dead") == "1" || r.URL.Query().Get("dead") == "true"); e != nil {
			manage.WriteError(w, e)
			return
		}
		for _, ni := range n.rep.nodeInfos(r.Context()) {
			if ni.Name == name {
				manage.WriteJSON(w, ni)
				return
			}
		}
		manage.WriteJSON(w, NodeInfo{Name: name, State: "removing", Moves: []MoveInfo{}})
	}))
}

// setDrained asks the region to drain or undrain node name, refusing with the reason what
// cannot be done.
func (n *Node) setDrained(ctx context.Context, name string, drained bool) *wire.Error {
	r := n.rep
	if r == nil {
		return wire.Errorf(wire.CodeInvalidArgument, "node %q keeps single-copy topics (--replicas 1): draining moves raft leaderships, and it has none", n.cfg.Name)
	}
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

// nodeInfos lists the region's nodes with replicated topics, by name.
func (r *replicated) nodeInfos(ctx context.Context) []NodeInfo {
	n := r.n
	r.mu.Lock()
	voters, learners := slices.Clone(r.mu.voters), slices.Clone(r.mu.learners)
	names := maps.Clone(r.mu.names)
	r.mu.Unlock()
	drained := r.drain.drainedSet()
	infos := map[string]*NodeInfo{}
	info := func(name string) *NodeInfo {
		if infos[name] == nil {
			infos[name] = &NodeInfo{Name: name, Role: "none", Moves: []MoveInfo{}, Local: name == n.cfg.Name}
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
	out := make([]NodeInfo, 0, len(infos))
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
func (r *replicated) countGroups(info func(string) *NodeInfo, nameOf func(uint64) string) (led map[string]int, all bool) {
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

// String is a node's one-line progress, for logs and the CLI's waiting.
func (ni NodeInfo) String() string {
	meta := ""
	if ni.MetaLeader {
		meta = " and the metadata group"
	}
	s := fmt.Sprintf("%s: %s, leads %d of its %d groups%s", ni.Name, ni.State, ni.Led, ni.Held, meta)
	for _, m := range ni.Moves {
		s += fmt.Sprintf("; %s %s->%s %s", m.Group, m.From, m.To, m.State)
		if m.Of > 0 {
			s += fmt.Sprintf(" %d/%d entries", m.Entries, m.Of)
		}
		if m.Bytes > 0 {
			s += fmt.Sprintf(" %d bytes", m.Bytes)
		}
	}
	return s
}

// remove asks the region to remove node name (move.go), refusing with the reason what
// cannot be done: the region would be left with fewer nodes than Replicas, or the node's
// state does not match dead (a node that is down cannot hand its replicas over; one that
// is up is not dead).
func (n *Node) remove(ctx context.Context, name string, dead bool) *wire.Error {
	r := n.rep
	if r == nil {
		return wire.Errorf(wire.CodeInvalidArgument, "node %q keeps single-copy topics (--replicas 1): removing moves raft replicas, and it has none", n.cfg.Name)
	}
	var target *NodeInfo
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
