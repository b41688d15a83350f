package node

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/quicmq/quicmq/federation"
	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/node/manage"
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

// AdminHandler serves /metrics (Prometheus) and the admin API: GET /v1/members (the gossip
// member table), GET /v1/links (each link with its figures and a page of its mirrored
// topics: linksOptions), POST /v1/links/migrate?region=R
// (migrate the links to R, or all, to new local sockets), GET /v1/gossip/keys (the keyring,
// as fingerprints) and POST /v1/gossip/keys/{install,use,remove} with the base64 key as the
// body (a pool-wide key rotation step), and consumer and topic management (node/manage, admin.go:
// GET /v1/consumers[/{name}], POST /v1/consumers/{name}/reset, DELETE /v1/consumers/{name},
// POST /v1/topics/{topic}, POST /v1/topics/{topic}/purge, DELETE /v1/topics/{topic}), and the
// region's nodes (nodes_admin.go: GET /v1/nodes, POST /v1/nodes/{name}/drain and /undrain). The
// POSTs and DELETEs change state: they are served only with Config.AdminAPI, and refused
// with 403 otherwise. Bind it to an address only operators
// reach. It never shows a key or a payload.
func (n *Node) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", n.MetricsHandler())
	mux.HandleFunc("GET /v1/gossip/keys", func(w http.ResponseWriter, r *http.Request) {
		n.gossipKeys(w, "list", nil)
	})
	mux.HandleFunc("POST /v1/gossip/keys/{op}", n.stateChanging(func(w http.ResponseWriter, r *http.Request) {
		op := r.PathValue("op")
		if op != "install" && op != "use" && op != "remove" {
			http.Error(w, fmt.Sprintf("unknown key operation %q: want install, use or remove", op), http.StatusNotFound)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<10))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(body)))
		if err != nil || len(key) != gossip.KeySize {
			http.Error(w, fmt.Sprintf("the body must be the base64 of a %d-byte key", gossip.KeySize), http.StatusBadRequest)
			return
		}
		n.gossipKeys(w, op, key)
	}))
	mux.HandleFunc("GET /v1/members", func(w http.ResponseWriter, r *http.Request) {
		manage.WriteJSON(w, n.Members())
	})
	mux.HandleFunc("GET /v1/links", func(w http.ResponseWriter, r *http.Request) {
		o, err := linksOptions(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if n.fed == nil {
			manage.WriteJSON(w, []federation.LinkInfo{})
			return
		}
		manage.WriteJSON(w, n.fed.LinksPage(o))
	})
	mux.HandleFunc("POST /v1/links/migrate", n.stateChanging(func(w http.ResponseWriter, r *http.Request) {
		if n.fed == nil {
			http.Error(w, "this node has no links (no WAN gossip pool)", http.StatusConflict)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), n.cfg.MigrateTimeout)
		defer cancel()
		if err := n.fed.Migrate(ctx, r.URL.Query().Get("region")); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		manage.WriteJSON(w, n.fed.LinksPage(federation.LinksOptions{MaxMirrors: DefaultLinkMirrors}))
	}))
	manage.Routes(mux, manageLocal{n}, n.place != nil, n.stateChanging)
	n.nodesRoutes(mux) // nodes_admin.go
	return mux
}

// stateChanging serves h only when the operator enabled the state-changing endpoints
// (Config.AdminAPI); otherwise it answers 403 saying how to enable them.
func (n *Node) stateChanging(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !n.cfg.AdminAPI {
			http.Error(w, fmt.Sprintf("%s %s changes the node's state and is off on this node: start it with --admin-api (config key admin_api = true) to enable it",
				r.Method, r.URL.Path), http.StatusForbidden)
			return
		}
		h(w, r)
	}
}

// KeyringStatus is the outcome of a gossip key operation in one pool: keys are shown by
// fingerprint (the first 8 bytes of their SHA-256, hex), never themselves.
type KeyringStatus struct {
	Pool      string            `json:"pool"`
	Members   int               `json:"members"`
	Responses int               `json:"responses"`
	Failures  map[string]string `json:"failures,omitempty"`
	Keys      map[string]int    `json:"keys,omitempty"`    // fingerprint -> members holding it
	Primary   map[string]int    `json:"primary,omitempty"` // fingerprint -> members using it
}

// KeyFingerprint names a gossip key without revealing it.
func KeyFingerprint(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:8])
}

func (n *Node) gossipKeys(w http.ResponseWriter, op string, key []byte) {
	if n.gossip == nil {
		http.Error(w, "this node has no gossip", http.StatusConflict)
		return
	}
	var st []gossip.KeyStatus
	var err error
	switch op {
	case "list":
		st, err = n.gossip.ListKeys()
	case "install":
		st, err = n.gossip.InstallKey(key)
	case "use":
		st, err = n.gossip.UseKey(key)
	case "remove":
		st, err = n.gossip.RemoveKey(key)
	}
	if errors.Is(err, gossip.ErrNotEncrypted) {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	fp := func(m map[string]int) map[string]int {
		if m == nil {
			return nil
		}
		out := make(map[string]int, len(m))
		for k, v := range m {
			raw, _ := base64.StdEncoding.DecodeString(k)
			out[KeyFingerprint(raw)] = v
		}
		return out
	}
	out := []KeyringStatus{}
	for _, s := range st {
		out = append(out, KeyringStatus{Pool: s.Pool.String(), Members: s.Members, Responses: s.Responses,
			Failures: s.Failures, Keys: fp(s.Keys), Primary: fp(s.Primary)})
	}
	if err != nil {
		n.log.Warn("gossip key operation incomplete", "op", op, "err", err)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadGateway)
		json.NewEncoder(w).Encode(map[string]any{"error": err.Error(), "pools": out})
		return
	}
	manage.WriteJSON(w, out)
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

// DefaultLinkMirrors is how many of each link's mirrored topics GET /v1/links lists without
// ?mirrors=N: a link mirrors any number of topics, so the list comes by pages.
const DefaultLinkMirrors = 1000

// linksOptions reads GET /v1/links's parameters: mirrors=N (how many mirrored topics per
// link, by name; default DefaultLinkMirrors, 0 for none), mirrors_after=TOPIC (the page
// after a link's mirrors_next) and node=NAME (only the link to that peer node).
func linksOptions(r *http.Request) (federation.LinksOptions, error) {
	q := r.URL.Query()
	o := federation.LinksOptions{Node: q.Get("node"), MirrorsAfter: q.Get("mirrors_after"), MaxMirrors: DefaultLinkMirrors}
	if v := q.Get("mirrors"); v != "" {
		m, err := strconv.Atoi(v)
		if err != nil || m < 0 {
			return o, fmt.Errorf("mirrors=%q: want a count of topics per link, 0 or more", v)
		}
		o.MaxMirrors = m
	}
	return o, nil
}
