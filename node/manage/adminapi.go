package manage

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/quicmq/quicmq/federation"
	"github.com/quicmq/quicmq/gossip"
)

// AdminConfig is what the admin API serves, given by the node (node.AdminHandler).
type AdminConfig struct {
	// Here is the node's side of consumer and topic management.
	Here *Here
	// Metrics serves GET /metrics.
	Metrics http.Handler
	// Gossip is the node's gossip pools; nil for a node without gossip. QUICTag is the
	// gossip tag holding a member's QUIC address.
	Gossip  Gossip
	QUICTag string
	// Links is the node's links to the other nodes of the mesh; nil without them.
	Links Links
	// Nodes is the region's nodes with replicated topics; nil for a node of single-copy
	// topics.
	Nodes Nodes
	// StateChanging serves the endpoints that change state (Config.AdminAPI); without it
	// they answer 403.
	StateChanging bool
	// MigrateTimeout bounds POST /v1/links/migrate.
	MigrateTimeout time.Duration
}

// Gossip is what the admin API reads and changes of the node's gossip pools.
type Gossip interface {
	Members() []gossip.Member
	ListKeys() ([]gossip.KeyStatus, error)
	InstallKey(key []byte) ([]gossip.KeyStatus, error)
	UseKey(key []byte) ([]gossip.KeyStatus, error)
	RemoveKey(key []byte) ([]gossip.KeyStatus, error)
}

// Links is what the admin API reads and changes of the node's links (federation).
type Links interface {
	LinksPage(o federation.LinksOptions) []federation.LinkInfo
	Migrate(ctx context.Context, region string) error
}

// Admin serves /metrics (Prometheus) and the admin API: GET /v1/members (the gossip member
// table), GET /v1/links (each link with its figures and a page of its mirrored topics:
// linksOptions), POST /v1/links/migrate?region=R (migrate the links to R, or all, to new
// local sockets), GET /v1/gossip/keys (the keyring, as fingerprints) and POST
// /v1/gossip/keys/{install,use,remove} with the base64 key as the body (a pool-wide key
// rotation step), and consumer and topic management (Routes: GET /v1/consumers[/{name}],
// POST /v1/consumers/{name}/reset, DELETE /v1/consumers/{name}, POST /v1/topics/{topic},
// POST /v1/topics/{topic}/purge, DELETE /v1/topics/{topic}), and the region's nodes
// (nodes.go: GET /v1/nodes, POST /v1/nodes/{name}/drain, /undrain and /remove). The POSTs
// and DELETEs change state: they are served only with StateChanging, and refused with 403
// otherwise. Bind it to an address only operators reach. It never shows a key or a payload.
func Admin(cfg AdminConfig) http.Handler {
	a := &admin{cfg}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", cfg.Metrics)
	mux.HandleFunc("GET /v1/gossip/keys", func(w http.ResponseWriter, r *http.Request) {
		a.gossipKeys(w, "list", nil)
	})
	mux.HandleFunc("POST /v1/gossip/keys/{op}", a.stateChanging(func(w http.ResponseWriter, r *http.Request) {
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
		a.gossipKeys(w, op, key)
	}))
	mux.HandleFunc("GET /v1/members", func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, a.members())
	})
	mux.HandleFunc("GET /v1/links", func(w http.ResponseWriter, r *http.Request) {
		o, err := linksOptions(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if cfg.Links == nil {
			WriteJSON(w, []federation.LinkInfo{})
			return
		}
		WriteJSON(w, cfg.Links.LinksPage(o))
	})
	mux.HandleFunc("POST /v1/links/migrate", a.stateChanging(func(w http.ResponseWriter, r *http.Request) {
		if cfg.Links == nil {
			http.Error(w, "this node has no links (no WAN gossip pool)", http.StatusConflict)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), cfg.MigrateTimeout)
		defer cancel()
		if err := cfg.Links.Migrate(ctx, r.URL.Query().Get("region")); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		WriteJSON(w, cfg.Links.LinksPage(federation.LinksOptions{MaxMirrors: DefaultLinkMirrors}))
	}))
	Routes(mux, cfg.Here, cfg.Here.cfg.InRegion, a.stateChanging)
	a.nodesRoutes(mux) // nodes.go
	return mux
}

// admin is the admin API's handlers over its AdminConfig.
type admin struct{ cfg AdminConfig }

// stateChanging serves h only when the operator enabled the state-changing endpoints
// (StateChanging); otherwise it answers 403 saying how to enable them.
func (a *admin) stateChanging(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !a.cfg.StateChanging {
			http.Error(w, fmt.Sprintf("%s %s changes the node's state and is off on this node: start it with --admin-api (config key admin_api = true) to enable it",
				r.Method, r.URL.Path), http.StatusForbidden)
			return
		}
		h(w, r)
	}
}
