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
	// nothing until undrained, whether or not it is up) or "removing" (never yet: nodes
	// are not removed by the API).
	State string `json:"state"`
	Held  int    `json:"held"` // data groups it holds a replica of
	// Led is the number of data groups it leads: counted from this node's groups when it
	// holds every group, and otherwise as the node announces it in gossip.
	Led        int        `json:"led"`
	MetaLeader bool       `json:"meta_leader"` // it leads the region's metadata group
	Moves      []MoveInfo `json:"moves"`       // always empty: replica moves do not exist yet
	Local      bool       `json:"local"`       // the node answering
}

// MoveInfo is a move of a replica in progress (none exist yet; the field is reserved).
type MoveInfo struct {
	Group string `json:"group"`
	From  string `json:"from"`
	To    string `json:"to"`
}

// nodesRoutes adds the region's node endpoints to the admin API: GET /v1/nodes, and POST
// /v1/nodes/{name}/drain and /undrain (state-changing: Config.AdminAPI).
func (n *Node) nodesRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/nodes", func(w http.ResponseWriter, r *http.Request) {
		if n.rep == nil {
			adminError(w, wire.Errorf(wire.CodeInvalidArgument, "node %q keeps single-copy topics (--replicas 1): it has no raft groups, nothing to list", n.cfg.Name))
			return
		}
		writeJSON(w, n.rep.nodeInfos(r.Context()))
	})
	drain := func(drained bool) http.HandlerFunc {
		return n.stateChanging(func(w http.ResponseWriter, r *http.Request) {
			if e := n.setDrained(r.Context(), r.PathValue("name"), drained); e != nil {
				adminError(w, e)
				return
			}
			for _, ni := range n.rep.nodeInfos(r.Context()) {
				if ni.Name == r.PathValue("name") {
					writeJSON(w, ni)
					return
				}
			}
			writeJSON(w, NodeInfo{Name: r.PathValue("name"), Moves: []MoveInfo{}})
		})
	}
	mux.HandleFunc("POST /v1/nodes/{name}/drain", drain(true))
	mux.HandleFunc("POST /v1/nodes/{name}/undrain", drain(false))
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
	if ok, lacking := n.RegionKnows(featMeta, drainVersion); !ok {
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
	for _, m := range r.raftMembers() {
		info(m.name)
	}
	if n.gossip != nil {
		for _, m := range n.gossip.RegionMembers(n.cfg.Region) {
			if v, ok := m.Tags[tagLeads]; ok {
				tags[m.Name] = v
			}
		}
	}
	for name := range drained {
		info(name)
	}
	if ro, ok := r.d.Role(metaGroup); ok && ro.Lead != 0 {
		if nm := nameOf(ro.Lead); nm != "" {
			info(nm).MetaLeader = true
		}
	}
	// Held from the placements; led from this node's view of its groups' leaders, exact
	// when it holds every group.
	r.pl.RLock()
	all := true
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
	seen := map[string]int{}
	for _, g := range local {
		if ro, ok := r.d.Role(g.id); ok && ro.Lead != 0 {
			if nm := nameOf(ro.Lead); nm != "" {
				seen[nm]++
			}
		}
	}
	for name, ni := range infos {
		ni.Led = seen[name]
		if c, err := strconv.Atoi(tags[name]); err == nil && !all && name != n.cfg.Name {
			ni.Led = c
		}
		switch {
		case drained[name]:
			ni.State = "draining"
		case name == n.cfg.Name || n.gossip != nil && n.place.memberStatus(name) == gossip.StatusAlive:
			ni.State = "up"
		default:
			ni.State = "down"
		}
	}
	out := make([]NodeInfo, 0, len(infos))
	for _, name := range slices.Sorted(maps.Keys(infos)) {
		out = append(out, *infos[name])
	}
	return out
}

// String is a node's one-line progress, for logs and the CLI's waiting.
func (ni NodeInfo) String() string {
	meta := ""
	if ni.MetaLeader {
		meta = " and the metadata group"
	}
	return fmt.Sprintf("%s: %s, leads %d of its %d groups%s", ni.Name, ni.State, ni.Led, ni.Held, meta)
}
