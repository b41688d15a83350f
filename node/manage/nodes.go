package manage

import (
	"context"
	"fmt"
	"net/http"

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

// MoveInfo is a move of a group's replica in progress (node/relocate/move.go).
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

// Nodes is the region's nodes with replicated topics, as the node's replicated path knows
// them (node/relocate/nodes.go): it lists them and checks and records a drain or a removal.
type Nodes interface {
	// Infos lists the region's nodes with replicated topics, by name.
	Infos(ctx context.Context) []NodeInfo
	// SetDrained asks the region to drain or undrain node name, refusing with the reason
	// what cannot be done.
	SetDrained(ctx context.Context, name string, drained bool) *wire.Error
	// Remove asks the region to remove node name (dead: it will not come back), refusing
	// with the reason what cannot be done.
	Remove(ctx context.Context, name string, dead bool) *wire.Error
}

// nodesRoutes adds the region's node endpoints to the admin API: GET /v1/nodes, and POST
// /v1/nodes/{name}/drain, /undrain and /remove (state-changing).
func (a *admin) nodesRoutes(mux *http.ServeMux) {
	nodes, name := a.cfg.Nodes, a.cfg.Here.cfg.Name
	singleCopy := func(w http.ResponseWriter, what string) {
		WriteError(w, wire.Errorf(wire.CodeInvalidArgument, "node %q keeps single-copy topics (--replicas 1): %s", name, what))
	}
	mux.HandleFunc("GET /v1/nodes", func(w http.ResponseWriter, r *http.Request) {
		if nodes == nil {
			singleCopy(w, "it has no raft groups, nothing to list")
			return
		}
		WriteJSON(w, nodes.Infos(r.Context()))
	})
	drain := func(drained bool) http.HandlerFunc {
		return a.stateChanging(func(w http.ResponseWriter, r *http.Request) {
			if nodes == nil {
				singleCopy(w, "draining moves raft leaderships, and it has none")
				return
			}
			if e := nodes.SetDrained(r.Context(), r.PathValue("name"), drained); e != nil {
				WriteError(w, e)
				return
			}
			writeNode(w, nodes.Infos(r.Context()), NodeInfo{Name: r.PathValue("name"), Moves: []MoveInfo{}})
		})
	}
	mux.HandleFunc("POST /v1/nodes/{name}/drain", drain(true))
	mux.HandleFunc("POST /v1/nodes/{name}/undrain", drain(false))
	mux.HandleFunc("POST /v1/nodes/{name}/remove", a.stateChanging(func(w http.ResponseWriter, r *http.Request) {
		if nodes == nil {
			singleCopy(w, "removing moves raft replicas, and it has none")
			return
		}
		name := r.PathValue("name")
		if e := nodes.Remove(r.Context(), name, r.URL.Query().Get("dead") == "1" || r.URL.Query().Get("dead") == "true"); e != nil {
			WriteError(w, e)
			return
		}
		writeNode(w, nodes.Infos(r.Context()), NodeInfo{Name: name, State: "removing", Moves: []MoveInfo{}})
	}))
}

// writeNode answers with the row of infos named as gone is, or with gone when none is.
func writeNode(w http.ResponseWriter, infos []NodeInfo, gone NodeInfo) {
	for _, ni := range infos {
		if ni.Name == gone.Name {
			WriteJSON(w, ni)
			return
		}
	}
	WriteJSON(w, gone)
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
