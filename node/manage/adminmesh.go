package manage

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/quicmq/quicmq/federation"
	"github.com/quicmq/quicmq/gossip"
)

// The admin API's view of the mesh (Admin): the gossip member table, the gossip keyring,
// and the options of the links' listing.

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

func (a *admin) gossipKeys(w http.ResponseWriter, op string, key []byte) {
	if a.cfg.Gossip == nil {
		http.Error(w, "this node has no gossip", http.StatusConflict)
		return
	}
	var st []gossip.KeyStatus
	var err error
	switch op {
	case "list":
		st, err = a.cfg.Gossip.ListKeys()
	case "install":
		st, err = a.cfg.Gossip.InstallKey(key)
	case "use":
		st, err = a.cfg.Gossip.UseKey(key)
	case "remove":
		st, err = a.cfg.Gossip.RemoveKey(key)
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
		a.cfg.Here.cfg.Log.Warn("gossip key operation incomplete", "op", op, "err", err)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadGateway)
		json.NewEncoder(w).Encode(map[string]any{"error": err.Error(), "pools": out})
		return
	}
	WriteJSON(w, out)
}

// members is the gossip member table (empty for a standalone node).
func (a *admin) members() []MemberInfo {
	out := []MemberInfo{}
	if a.cfg.Gossip == nil {
		return out
	}
	for _, m := range a.cfg.Gossip.Members() {
		mi := MemberInfo{
			Name: m.Name, Region: m.Region, Status: m.Status.String(), Gossip: m.Addr,
			QUIC: m.Tags[a.cfg.QUICTag], Tags: m.Tags, IsLocal: m.Name == a.cfg.Here.cfg.Name,
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
