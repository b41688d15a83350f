package node

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/quicmq/quicmq/federation"
	"github.com/quicmq/quicmq/gossip"
)

// MemberInfo is one row of GET /v1/members.
type MemberInfo struct {
	Name    string            `json:"name"`
	Region  string            `json:"region"`
	Status  string            `json:"status"`
	Gossip  string            `json:"gossip"`
	QUIC    string            `json:"quic"`
	Pools   []string          `json:"pools"`
	Tags    map[string]string `json:"tags"`
	IsLocal bool              `json:"local"`
}

// AdminHandler serves, on the node's metrics address: /metrics (Prometheus), GET
// /v1/members (the gossip member table), GET /v1/links (each link with its figures) and POST
// /v1/links/migrate?region=R (migrate the links to R, or all, to new local sockets). Bind it
// to an address only operators reach: it can trigger migrations.
func (n *Node) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", n.MetricsHandler())
	mux.HandleFunc("GET /v1/members", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, n.Members())
	})
	mux.HandleFunc("GET /v1/links", func(w http.ResponseWriter, r *http.Request) {
		if n.fed == nil {
			writeJSON(w, []federation.LinkInfo{})
			return
		}
		writeJSON(w, n.fed.Links())
	})
	mux.HandleFunc("POST /v1/links/migrate", func(w http.ResponseWriter, r *http.Request) {
		if n.fed == nil {
			http.Error(w, "this node has no links (no WAN gossip pool)", http.StatusConflict)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
		defer cancel()
		if err := n.fed.Migrate(ctx, r.URL.Query().Get("region")); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		writeJSON(w, n.fed.Links())
	})
	return mux
}

// Members is the gossip member table (empty for a standalone node).
func (n *Node) Members() []MemberInfo {
	out := []MemberInfo{}
	if n.gossip == nil {
		return out
	}
	for _, m := range n.gossip.Members() {
		mi := MemberInfo{
			Name: m.Name, Region: m.Region, Status: m.Status.String(), Gossip: m.Addr,
			QUIC: m.Tags[tagQUIC], Tags: m.Tags, IsLocal: m.Name == n.cfg.Name,
		}
		if m.Pools&gossip.PoolLAN != 0 {
			mi.Pools = append(mi.Pools, "lan")
		}
		if m.Pools&gossip.PoolWAN != 0 {
			mi.Pools = append(mi.Pools, "wan")
		}
		out = append(out, mi)
	}
	return out
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
