package gossip

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Tag keys the package sets itself; Config.Tags and SetTags may not use them.
const (
	TagRegion = "region"
	TagRole   = "role"
)

// RoleNode is the value of the "role" tag of every QuicMQ node, so that a member that is
// not a QuicMQ node (another program reusing the key and port by mistake) can be told apart.
const RoleNode = "quicmq-node"

// MaxTagsSize is the largest encoded size of a node's tags (memberlist's MetaMaxSize),
// counting the "region" and "role" tags the package adds.
const MaxTagsSize = 512

// KeySize is the size of the gossip key: AES-256-GCM.
const KeySize = 32

const (
	maxNameLen   = 128
	maxRegionLen = 64
)

// Profile selects memberlist and serf timers for both pools.
type Profile int

const (
	// ProfileDefault: memberlist DefaultLANConfig for the LAN pool and DefaultWANConfig for the
	// WAN pool; serf's defaults (failed members reaped after 24 h, left ones after 24 h).
	// Failure detection takes seconds on a LAN and tens of seconds on the WAN.
	ProfileDefault Profile = iota
	// ProfileLocal: memberlist DefaultLocalConfig for both pools (one host or a fast network);
	// serf's defaults otherwise.
	ProfileLocal
	// ProfileTest: fast timers for tests on loopback: probes every 400 ms, gossip every 50 ms,
	// a failure noticed within about 3 s, failed and left members reaped after 6 s, a
	// dead node's name reclaimable at a new address at once. Never for production:
	// it is chatty and quick to declare failures.
	ProfileTest
)

func (p Profile) String() string {
	switch p {
	case ProfileDefault:
		return "default"
	case ProfileLocal:
		return "local"
	case ProfileTest:
		return "test"
	default:
		return "profile(" + strconv.Itoa(int(p)) + ")"
	}
}

// Config configures a Gossip. Name, Region and LANAddr are required; every other field's
// zero value works.
type Config struct {
	// Name is the node's name, unique in the whole mesh (both pools use it). Letters,
	// digits, '-', '_' and '.', at most 128 bytes. Required.
	Name string
	// Region is the node's region: letters, digits, '-' and '_', at most 64 bytes. It selects
	// the LAN pool (label "quicmq-lan/<Region>") and is published as the "region" tag.
	// Required.
	Region string
	// LANAddr is HOST:PORT to bind the region's LAN pool to (UDP and TCP). HOST is an IP
	// literal or empty (all interfaces); port 0 picks a free port. Required.
	LANAddr string
	// WANAddr is HOST:PORT for the WAN pool across regions; "" means this node does not join
	// the WAN pool (it then sees only its own region).
	WANAddr string
	// AdvertiseLAN and AdvertiseWAN are the IP:PORT other members use to reach this node's
	// pools (behind NAT or a container network). Default: the bound address (for an
	// unspecified bind host, memberlist picks a private address of the host). Port 0 means
	// the bound port; a non-zero advertised port needs a non-zero bind port.
	AdvertiseLAN, AdvertiseWAN string
	// Key is the 32-byte AES-GCM gossip key, used for both pools. nil disables encryption:
	// for development only (a warning is logged).
	Key []byte
	// ExtraKeys are further keys this node accepts (decrypts with) but does not send
	// with: the old or the next key while a rotation is under way, so that a node
	// restarted in the middle of one still understands the pool. Each is KeySize bytes;
	// they need Key.
	ExtraKeys [][]byte
	// Tags are extra tags published to both pools (for example "quic": the node's client
	// QUIC address, "peer": its node-to-node QUIC address). The package adds "region" and
	// "role"; those keys are reserved. The encoded tags must fit in MaxTagsSize bytes.
	Tags map[string]string
	// Profile selects the timers (default ProfileDefault).
	Profile Profile
	// LeaveTimeout bounds a graceful leave of each pool (both leave at once, in Close or when
	// Run's context ends): serf waits up to 2/5 of it for its leave intent to go out and as
	// long for memberlist's dead message, then lingers 1/5 of it answering probes. Peers that
	// are up hear a leave within milliseconds; the bound matters when they are stopping too
	// (a whole mesh stopping) or unreachable, and they then see a failure instead of a leave.
	// It also bounds SetTags' wait for its broadcast (2/5 of it). 0: the profile's: 11 s for
	// ProfileDefault (serf's 5 s + 5 s + 1 s), 1 s for ProfileLocal (one host or a fast
	// network), 2.3 s for ProfileTest. Must not be negative.
	LeaveTimeout time.Duration
	// Logger receives serf's and memberlist's logs (at their levels) and the package's own.
	// Default: slog.Default().
	Logger *slog.Logger
	// Registerer receives the package's metrics; nil: no metrics.
	Registerer prometheus.Registerer
}

// Validate reports every problem of the config at once.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("gossip: config: "+format, args...))
	}
	switch {
	case c.Name == "":
		bad("Name is required")
	case len(c.Name) > maxNameLen || !validName(c.Name, true):
		bad("Name %q: want 1-%d letters, digits, '-', '_' or '.'", c.Name, maxNameLen)
	}
	switch {
	case c.Region == "":
		bad("Region is required")
	case len(c.Region) > maxRegionLen || !validName(c.Region, false):
		bad("Region %q: want 1-%d letters, digits, '-' or '_'", c.Region, maxRegionLen)
	}
	var lanPort, wanPort int
	if c.LANAddr == "" {
		bad("LANAddr is required")
	} else if _, p, err := parseBind(c.LANAddr); err != nil {
		bad("LANAddr: %v", err)
	} else {
		lanPort = p
	}
	if c.WANAddr != "" {
		if _, p, err := parseBind(c.WANAddr); err != nil {
			bad("WANAddr: %v", err)
		} else {
			wanPort = p
			if p != 0 && p == lanPort {
				bad("LANAddr and WANAddr use the same port %d: the pools need separate ports", p)
			}
		}
	}
	if c.AdvertiseLAN != "" {
		if err := checkAdvertise(c.AdvertiseLAN, lanPort); err != nil {
			bad("AdvertiseLAN: %v", err)
		}
	}
	if c.AdvertiseWAN != "" {
		if c.WANAddr == "" {
			bad("AdvertiseWAN is set but WANAddr is empty")
		} else if err := checkAdvertise(c.AdvertiseWAN, wanPort); err != nil {
			bad("AdvertiseWAN: %v", err)
		}
	}
	if c.Key != nil && len(c.Key) != KeySize {
		bad("Key is %d bytes, want %d (AES-256-GCM) or nil", len(c.Key), KeySize)
	}
	for i, k := range c.ExtraKeys {
		if len(k) != KeySize {
			bad("ExtraKeys[%d] is %d bytes, want %d", i, len(k), KeySize)
		}
	}
	if len(c.ExtraKeys) > 0 && c.Key == nil {
		bad("ExtraKeys need Key: an unencrypted pool has no keyring")
	}
	if _, err := c.fullTags(c.Tags); err != nil {
		errs = append(errs, fmt.Errorf("gossip: config: Tags: %w", err))
	}
	if c.LeaveTimeout < 0 {
		bad("LeaveTimeout must not be negative, got %v", c.LeaveTimeout)
	}
	if c.Profile < ProfileDefault || c.Profile > ProfileTest {
		bad("unknown Profile %d", int(c.Profile))
	}
	return errors.Join(errs...)
}

// fullTags returns tags plus the reserved ones, or an error naming a reserved key or the
// encoded size.
func (c Config) fullTags(tags map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(tags)+2)
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(tags)) { // sorted: the same error every time
		if k == TagRegion || k == TagRole {
			errs = append(errs, fmt.Errorf("%w: %q", ErrReservedTag, k))
			continue
		}
		out[k] = tags[k]
	}
	out[TagRegion] = c.Region
	out[TagRole] = RoleNode
	if n := encodedTagsSize(out); n > MaxTagsSize {
		errs = append(errs, fmt.Errorf("%w: %d bytes encoded (with region and role), limit %d",
			ErrTagsTooLarge, n, MaxTagsSize))
	}
	return out, errors.Join(errs...)
}

// encodedTagsSize is the size of serf's tag encoding: a magic byte, then the map in
// msgpack as go-msgpack writes it with its default handle (old-spec raw strings, no str8).
// TestEncodedTagsSizeMatchesSerf checks it against serf's own limit check.
func encodedTagsSize(tags map[string]string) int {
	n := 1 + msgpackHeader(len(tags), 16)
	for k, v := range tags {
		n += msgpackHeader(len(k), 32) + len(k) + msgpackHeader(len(v), 32) + len(v)
	}
	return n
}

// msgpackHeader is the size of a map or raw-string header: a fix form below fixLimit
// elements, then 16- and 32-bit lengths.
func msgpackHeader(length, fixLimit int) int {
	switch {
	case length < fixLimit:
		return 1
	case length < 1<<16:
		return 3
	default:
		return 5
	}
}

func validName(s string, dots bool) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
		case c == '.' && dots:
		default:
			return false
		}
	}
	return true
}

// parseBind splits a bind address: HOST empty or an IP literal, PORT 0-65535.
func parseBind(addr string) (string, int, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%q: %w", addr, err)
	}
	if host != "" && net.ParseIP(host) == nil {
		return "", 0, fmt.Errorf("%q: host must be an IP address or empty", addr)
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("%q: bad port", addr)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return host, int(port), nil
}

func checkAdvertise(addr string, bindPort int) error {
	host, port, err := parseBind(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip.IsUnspecified() {
		return fmt.Errorf("%q: must be a specific IP address", addr)
	}
	if port != 0 && bindPort == 0 {
		return fmt.Errorf("%q: an advertised port needs a fixed bind port (the bind port is 0)", addr)
	}
	return nil
}

func (c Config) lanLabel() string { return "quicmq-lan/" + c.Region }

const wanLabel = "quicmq-wan"
