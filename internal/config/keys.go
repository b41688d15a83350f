package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/quicmq/quicmq/routing"
)

// Kind is the type of a key's value and how it is checked.
type Kind int

const (
	String    Kind = iota // any non-empty string
	Addr                  // HOST:PORT
	Name                  // a node or region name: 1-64 of [A-Za-z0-9_-]
	AddrList              // list of HOST:PORT
	Patterns              // list of topic patterns
	Tokens                // list of client tokens, 16+ characters each
	TokenFile             // path of a readable file of tokens, one a line
	KeyFile               // path of a readable file holding a gossip key
	GossipKey             // base64 of 32 bytes
	Duration              // Go duration string ("168h"), not negative
	Size                  // whole number, not negative
	Positive              // whole number above zero
	LogLevel              // debug, info, warn or error
	Bool                  // true or false
)

// Key is one setting of the file.
type Key struct {
	Name string // key in the file, e.g. "wan_join"
	Flag string // the `quicmq node` flag it stands for, e.g. "wan-join"
	Kind Kind
	Doc  string
}

// Env is the environment variable that overrides the key (and is overridden by the flag):
// QUICMQ_<KEY>, except where that name is one the client commands read (QUICMQ_TOKEN_FILE is
// the client's token; the node's credential file is QUICMQ_NODE_TOKEN_FILE), so that one shell
// can set both. cmd/quicmq tests that the two sets stay apart.
func (k Key) Env() string {
	if v, ok := envRenamed[k.Name]; ok {
		return v
	}
	return "QUICMQ_" + strings.ToUpper(k.Name)
}

// envRenamed are the keys whose variable is not QUICMQ_<KEY>.
var envRenamed = map[string]string{"token_file": "QUICMQ_NODE_TOKEN_FILE"}

// Keys are the settings a file may hold, one per `quicmq node` flag (cmd/quicmq tests that the
// two lists match). max_payload's 64 MiB cap is the protocol's.
var Keys = []Key{
	{"data", "data", String, "data directory: the log and generated TLS material"},
	{"listen", "listen", Addr, "UDP address of the QUIC client listener"},
	{"advertise", "advertise", Addr, "QUIC address other nodes dial"},
	{"metrics", "metrics", Addr, "HTTP address of /metrics and the admin API"},
	{"region", "region", Name, "region this node belongs to"},
	{"name", "name", Name, "node name"},
	{"admin", "admin", Addr, "HTTP address of the admin API /v1/, apart from metrics (operators only)"},
	{"admin_api", "admin-api", Bool, "serve the admin API's state-changing endpoints (link migration, gossip key changes)"},
	{"ca_dir", "ca-dir", String, "the mesh CA directory (ca.pem + ca-key.pem)"},
	{"cert", "cert", String, "the node's certificate (PEM, from quicmq certs node)"},
	{"key", "key", String, "the key of cert (PEM)"},
	{"ca_bundle", "ca-bundle", String, "PEM file of the CAs trusted for peers and client certificates"},
	{"gossip", "gossip", Addr, "HOST:PORT of the region's gossip pool (LAN)"},
	{"wan", "wan", Addr, "HOST:PORT of the gossip pool across regions (WAN)"},
	{"gossip_advertise", "gossip-advertise", Addr, "IP:PORT the region's nodes reach the LAN gossip pool at (NAT)"},
	{"wan_advertise", "wan-advertise", Addr, "IP:PORT other regions reach the WAN gossip pool at (a public IP not on the host)"},
	{"join", "join", AddrList, "gossip addresses of nodes of this region to join"},
	{"wan_join", "wan-join", AddrList, "WAN gossip addresses of nodes of other regions to join"},
	{"gossip_key", "gossip-key", GossipKey, "base64 of the 32-byte gossip key"},
	{"gossip_key_file", "gossip-key-file", KeyFile, "file holding the base64 gossip key"},
	{"mirror", "mirror", Patterns, "topic patterns mirrored from every other region"},
	{"tokens", "tokens", Tokens, "client tokens (16+ characters each)"},
	{"token_file", "token-file", TokenFile, "file of client credentials, one a line: TOKEN or cert:NAME, with optional tenant=, publish=, subscribe="},
	{"anonymous", "anonymous", Bool, "accept clients without a credential (development only)"},
	{"insecure_gossip", "insecure-gossip", Bool, "gossip in plaintext without a key (development only)"},
	{"mirror_stall_after", "mirror-stall-after", Duration, "report a mirror as stalled when it carries no record this long while the origin's head moves"},
	{"mirror_streams", "mirror-streams", Positive, "mirror streams a link keeps open at once: mirrors of topics that move; quiet ones park until their origin's head moves"},
	{"retention_age", "retention-age", Duration, "delete records older than this (0: keep)"},
	{"retention_bytes", "retention-bytes", Size, "keep at most this many bytes per topic (0: no limit)"},
	{"retention_interval", "retention-interval", Duration, "how often retention runs (default 1m)"},
	{"max_payload", "max-payload", Positive, "largest record payload in bytes"},
	{"max_durables_per_tenant", "max-durables-per-tenant", Positive, "durable consumers a tenant may have stored on one node"},
	{"log_level", "log-level", LogLevel, "debug, info, warn or error"},
	{"pprof", "pprof", Bool, "serve Go's runtime profiles at /debug/pprof/ on the metrics address (operators only)"},
	{"raft_no_quiesce", "raft-no-quiesce", Bool, "keep idle raft groups heartbeating: faster failover, more heartbeats"},
	{"raft_no_compaction", "raft-no-compaction", Bool, "keep every raft entry forever (a fallback: records are then stored twice)"},
	{"raft_tick", "raft-tick", Duration, "one raft tick: elections after 10-20 ticks without a heartbeat (default 50ms)"},
	{"raft_groups_per_node", "raft-groups-per-node", Size, "raft groups per node holding the region's topics, set by the metadata leader (0: two per core, at least 4)"},
	{"raft_group_per_topic", "raft-group-per-topic", Bool, "place each new topic in a raft group of its own, the layout before groups held many topics (for comparison)"},
	{"raft_predict_placement", "raft-predict-placement", Bool, "relay a new topic's first publish at once to its predicted group leader, which waits for the placement (for comparison)"},
	{"raft_balance_interval", "raft-balance-interval", Duration, "how often at most a node moves one raft leadership to even leaders out (default 10s)"},
	{"raft_no_balance", "raft-no-balance", Bool, "turn the node's leader balancer off"},
	{"raft_moves", "raft-moves", Size, "replica moves in progress at once in the region, set by the metadata leader (0: 2)"},
	{"raft_no_replica_balance", "raft-no-replica-balance", Bool, "turn the replica balancer off (a node that joins takes only new groups)"},
	{"replace_after", "replace-after", Duration, "remove as dead a node down this long, re-creating its replicas elsewhere (0: off; at least 1m)"},
	{"raft_stop_handoff", "raft-stop-handoff", Duration, "how long a graceful stop waits for the node's raft leaderships to move (default 3s)"},
	{"replicas", "replicas", Positive, "replicas of each new topic in the region, kept in agreement by raft (1 to 7, odd recommended)"},
}

// KeyByName returns the key called name.
func KeyByName(name string) (Key, bool) {
	for _, k := range Keys {
		if k.Name == name {
			return k, true
		}
	}
	return Key{}, false
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// maxPayload is the protocol's cap on a record payload (node.Config.Validate says the same).
const maxPayload = 64 << 20

// checkScalar checks a string-typed value of a key; "" means fine.
func checkScalar(k Kind, s string) string {
	switch k {
	case String:
		if s == "" {
			return "must not be empty"
		}
	case Addr:
		return checkAddr(s)
	case Name:
		if !nameRE.MatchString(s) {
			return fmt.Sprintf("%q: want 1-64 characters of [A-Za-z0-9_-]", s)
		}
	case GossipKey:
		return checkKey(s)
	case TokenFile:
		_, msg := readTokens(s)
		return msg
	case KeyFile:
		b, err := os.ReadFile(s)
		if err != nil {
			return fmt.Sprintf("cannot read: %v", unwrapPath(err))
		}
		if msg := checkKey(strings.TrimSpace(string(b))); msg != "" {
			return s + ": " + msg
		}
	case Duration:
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Sprintf("%q: want a duration such as \"168h\" or \"30m\"", s)
		}
		if d < 0 {
			return "must not be negative"
		}
	case LogLevel:
		switch s {
		case "debug", "info", "warn", "error":
		default:
			return fmt.Sprintf("%q: want debug, info, warn or error", s)
		}
	}
	return ""
}

// checkItem checks one element of a list-typed key.
func checkItem(k Kind, s string) string {
	switch k {
	case AddrList:
		return checkAddr(s)
	case Patterns:
		if err := routing.ValidatePattern(s); err != nil {
			return err.Error()
		}
	case Tokens:
		return checkToken(s)
	}
	if strings.Contains(s, ",") {
		return fmt.Sprintf("%q: a list element must not contain ','", s)
	}
	return ""
}

// checkNumber checks a number-typed key.
func checkNumber(k Kind, v int64) string {
	switch {
	case k == Size && v < 0:
		return fmt.Sprintf("must not be negative, got %d", v)
	case k == Positive && v <= 0:
		return fmt.Sprintf("must be above zero, got %d", v)
	case k == Positive && v > maxPayload:
		return fmt.Sprintf("%d is over the protocol's 64 MiB", v)
	}
	return ""
}

func checkAddr(s string) string {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Sprintf("%q: want HOST:PORT", s)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Sprintf("%q: port %q is not a number from 0 to 65535", s, port)
	}
	if strings.ContainsAny(host, " ,") {
		return fmt.Sprintf("%q: bad host %q", s, host)
	}
	return ""
}

func checkKey(s string) string {
	k, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(k) != 32 {
		return "want the base64 of 32 bytes (e.g. from 'head -c32 /dev/urandom | base64')"
	}
	return ""
}

func checkToken(s string) string {
	if len(s) < 16 {
		return fmt.Sprintf("a token needs at least 16 characters, got %d", len(s))
	}
	if strings.ContainsAny(s, ", \t") {
		return "a token must not contain ',' or spaces"
	}
	return ""
}

// readTokens reads a token file as `quicmq node --token-file` does (see Credential for the
// format) and returns its tokens; the problem names the file and line.
func readTokens(path string) ([]string, string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Sprintf("cannot read: %v", unwrapPath(err))
	}
	creds, problems := ParseCredentials(string(b))
	if len(problems) > 0 {
		return nil, path + ": " + strings.Join(problems, "; ")
	}
	var out []string
	for _, c := range creds {
		if c.Token != "" {
			out = append(out, c.Token)
		}
	}
	return out, ""
}

// unwrapPath drops os.PathError's repetition of the operation and path.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Path, pe.Err)
	}
	return err
}
