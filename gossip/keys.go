package gossip

import (
	"encoding/base64"
	"errors"
	"fmt"
	"maps"

	"github.com/hashicorp/serf/serf"
)

// Gossip key rotation, while the pools run:
//
//  1. InstallKey(new): every member of the pool adds new to its keyring. Members still
//     send with the old key, and now accept both.
//  2. UseKey(new): every member makes new its primary key: it sends with new and still
//     accepts old, so a member that has not switched yet is understood, and understands.
//  3. RemoveKey(old): every member drops old.
//
// Each step is a serf query to every member of the pool, answered by each; a step that
// did not reach every member returns ErrKeyRotation with the per-member messages, and
// may simply be repeated (each step is idempotent; a step some members did not answer in
// time, reporting no failure, is asked again up to keyOpTries times before that). No step ever leaves two members
// without a common key, which is why the pool does not flap. The operations act on this
// node's LAN pool (its region) and on the WAN pool: the LAN pools of other regions are
// rotated by calling them on a node of each region.
//
// The keyring lives in memory: a node restarted during or after a rotation must be
// started with the new key (and, during the rotation, the old one in ExtraKeys).

var (
	// ErrNotEncrypted is returned by the key operations of a pool without a key.
	ErrNotEncrypted = errors.New("gossip: not encrypted (started without a gossip key): there are no keys to list or change")
	// ErrKeyRotation is returned when a key operation did not succeed on every member.
	ErrKeyRotation = errors.New("gossip: key operation incomplete")
)

// KeyStatus is the outcome of a key operation in one pool.
type KeyStatus struct {
	Pool      Pool
	Members   int               // members the pool knew when the query went out
	Responses int               // members that answered
	Failures  map[string]string // member name -> what it reported, for members that failed
	// Keys maps each key (base64) to the number of members holding it; Primary the
	// same for primary keys. Filled by ListKeys.
	Keys, Primary map[string]int
}

// InstallKey adds key to the keyring of every member of both pools.
func (g *Gossip) InstallKey(key []byte) ([]KeyStatus, error) {
	return g.keyOp("install", key, func(km *serf.KeyManager, k string) (*serf.KeyResponse, error) { return km.InstallKey(k) })
}

// UseKey makes key, which must be installed, the key every member sends with.
func (g *Gossip) UseKey(key []byte) ([]KeyStatus, error) {
	return g.keyOp("use", key, func(km *serf.KeyManager, k string) (*serf.KeyResponse, error) { return km.UseKey(k) })
}

// RemoveKey drops key from every member's keyring; the primary key cannot be removed.
func (g *Gossip) RemoveKey(key []byte) ([]KeyStatus, error) {
	return g.keyOp("remove", key, func(km *serf.KeyManager, k string) (*serf.KeyResponse, error) { return km.RemoveKey(k) })
}

// ListKeys asks every member of both pools for its keys.
func (g *Gossip) ListKeys() ([]KeyStatus, error) {
	return g.keyOp("list", nil, func(km *serf.KeyManager, _ string) (*serf.KeyResponse, error) { return km.ListKeys() })
}

func (g *Gossip) keyOp(op string, key []byte, do func(*serf.KeyManager, string) (*serf.KeyResponse, error)) ([]KeyStatus, error) {
	if g.cfg.Key == nil {
		return nil, ErrNotEncrypted // the sentence says it all, for list as for a change
	}
	if key != nil && len(key) != KeySize {
		return nil, fmt.Errorf("gossip: %s key: %d bytes, want %d", op, len(key), KeySize)
	}
	g.mu.Lock()
	closed := g.mu.closed
	g.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("gossip: %s key: %w", op, ErrClosed)
	}
	k := base64.StdEncoding.EncodeToString(key)
	var out []KeyStatus
	var errs []error
	for _, p := range []struct {
		pool Pool
		s    *serf.Serf
	}{{PoolLAN, g.lan}, {PoolWAN, g.wan}} {
		if p.s == nil {
			continue
		}
		resp, err := do(p.s.KeyManager(), k)
		// A member whose answer missed the query's deadline (a loaded host) reported no
		// failure: the step is idempotent, so it is asked again, a few times.
		for try := 1; err != nil && try < keyOpTries && silentOnly(resp); try++ {
			g.log.Info("gossip: key operation: members did not answer in time, asking again",
				"op", op, "pool", p.pool, "answered", resp.NumResp, "members", resp.NumNodes, "try", try+1)
			resp, err = do(p.s.KeyManager(), k)
		}
		st := KeyStatus{Pool: p.pool}
		if resp != nil {
			st.Members, st.Responses = resp.NumNodes, resp.NumResp
			st.Keys, st.Primary = maps.Clone(resp.Keys), maps.Clone(resp.PrimaryKeys)
			for name, msg := range resp.Messages {
				if msg != "" {
					if st.Failures == nil {
						st.Failures = map[string]string{}
					}
					st.Failures[name] = msg
				}
			}
		}
		out = append(out, st)
		if err != nil {
			errs = append(errs, fmt.Errorf("gossip: %s key in the %s pool: %w: %v (failures: %v)", op, p.pool, ErrKeyRotation, err, st.Failures))
		}
	}
	if len(errs) == 0 {
		g.log.Info("gossip: key operation done", "op", op, "pools", len(out))
	}
	return out, errors.Join(errs...)
}

// keyOpTries is how many times a key operation asks a pool when members did not answer.
const keyOpTries = 3

// silentOnly reports whether a key operation's answer fell short only by members that did
// not answer: none reported a failure.
func silentOnly(resp *serf.KeyResponse) bool {
	if resp == nil || resp.NumResp >= resp.NumNodes {
		return false
	}
	for _, msg := range resp.Messages {
		if msg != "" {
			return false
		}
	}
	return true
}
