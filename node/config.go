package node

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"regexp"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/timeline"
	"github.com/quicmq/quicmq/node/auth"
	"github.com/quicmq/quicmq/node/groups"
	"github.com/quicmq/quicmq/routing"
	"github.com/quicmq/quicmq/wal"
)

// GroupConfig holds the node's consumer group defaults and bounds (node/groups).
type GroupConfig = groups.Config

// Credential is what one client credential (a token, or a client certificate) may do: its
// tenant and its publish and subscribe grants (node/auth).
type Credential = auth.Credential

// Config configures a Node. The zero value plus DataDir is a working single node on
// 127.0.0.1:7400; every field documents its unit and default.
type Config struct {
	// DataDir holds the Pebble store (DATA/log) and, without TLS, the generated CA and node
	// certificate (DATA/tls). Required.
	DataDir string
	// Listen is the UDP address of the client listener. Default "127.0.0.1:7400"; port 0
	// picks a free port (Addr reports it).
	Listen string
	// Name identifies the node in logs, WELCOME and metrics. Default: the host name.
	Name string
	// Region is the node's region. Default "local".
	Region string

	// TLS is the server configuration (certificates, client CAs). Nil: the node uses the CA in
	// CADir (creating it if absent) and issues itself a certificate for its addresses.
	TLS *tls.Config
	// CADir is where the generated CA lives when TLS is nil. Default DATA/tls.
	CADir string
	// CertFile and KeyFile are the node's certificate and key (PEM, e.g. from
	// `quicmq certs node`): with them the node issues nothing and needs no CA key.
	CertFile, KeyFile string
	// CABundle is a PEM file of the CAs trusted for peers' and clients' certificates (and
	// the one clients are told to trust). Default CADir/ca.pem. A bundle of the old and new
	// CA keeps every link up during a CA rotation.
	CABundle string
	// Tokens, when not empty, are the tokens clients must present in HELLO; each gives the
	// whole namespace and every permission. Tokens and Credentials both empty: anonymous
	// clients are accepted (the node logs a warning).
	Tokens []string
	// Credentials are tokens and client certificates with a tenant and permissions.
	Credentials []Credential
	// MaxConnsPerTenant caps a tenant's open connections to this node. Default 1000.
	MaxConnsPerTenant int
	// MaxDurablesPerTenant caps the durable consumers a tenant has stored on this node (a
	// consumer counts from its first stored position until `quicmq consumers rm` removes it).
	// Default 1000 (flag --max-durables-per-tenant, config key max_durables_per_tenant).
	MaxDurablesPerTenant int

	// MaxPayload is the largest record payload in bytes. Default 1 MiB.
	MaxPayload int
	// MaxHeaderBytes caps one record's header keys and values, in bytes. Default 16 KiB.
	MaxHeaderBytes int
	// MaxStreamsPerConn caps the streams a client may have open at once (QUIC stream limit).
	// Default 2048.
	MaxStreamsPerConn int
	// MaxSubscriptionsPerConn caps open subscription streams per connection. Default 1024.
	MaxSubscriptionsPerConn int
	// MaxPendingPublishes caps unanswered publishes per publish stream; past it the node
	// stops reading the stream, so QUIC flow control slows the publisher. Default 4096.
	MaxPendingPublishes int
	// StreamWindow is the largest receive window of one stream, in bytes. Default 1 MiB.
	StreamWindow int
	// ConnWindow is the largest receive window of one connection, in bytes. Default 16 MiB.
	ConnWindow int
	// ReadAhead is how many bytes of records a subscription reads from the log at a time:
	// the bound on what a slow subscriber costs in memory beyond QUIC's send buffer.
	// Default 256 KiB.
	ReadAhead int
	// Groups holds the consumer groups' defaults and bounds (node/groups).
	Groups GroupConfig
	// Replicas is the replication factor of new topics in the node's region: 1 (the
	// default) keeps each topic's log on one node (its owner); 2 to 7 keep it on that many
	// nodes of the region, agreed by raft (node/replicated.go; odd counts recommended: 3
	// tolerates one node lost, 5 two). Every node of a region must be given the same
	// value. More than 1 needs GossipLAN.
	Replicas int
	// Raft holds the timers and bounds of replicated topics (used when Replicas > 1).
	Raft RaftSettings
	// TailRecords is how many of a topic's last appended records the node keeps in memory
	// for the subscriptions that are caught up on it (the shared tail, node/tail): they
	// are read from the log once per append batch for all of them. A topic has a tail only
	// while a subscription of this node reads it. Default 1024; negative: no shared tail
	// (every subscription reads the log itself).
	TailRecords int
	// TailBytes bounds the payload and header bytes one topic's shared tail holds, beside
	// TailRecords. Default 256 KiB.
	TailBytes int
	// HandshakeTimeout bounds how long a connection may take to send HELLO. Default 10 s.
	HandshakeTimeout time.Duration
	// ShutdownTimeout bounds how long Close waits for pending acks to be sent. Default 5 s.
	ShutdownTimeout time.Duration
	// IdleTimeout closes a connection that sent nothing (not even keep-alives). Default 30 s.
	IdleTimeout time.Duration
	// ClientPathInterval is how often the node compares each client connection's remote
	// address with the last one seen, counting a change (a client migration or a NAT
	// rebinding) in quicmq_client_migrations_total. Default 1 s.
	ClientPathInterval time.Duration

	// Advertise is the QUIC address other nodes dial, published in gossip. Default: the bound
	// address (set it when listening on 0.0.0.0 or behind NAT).
	Advertise string
	// GossipLAN is the HOST:PORT of the region's serf LAN pool. Empty: no gossip and no
	// federation (a standalone node).
	GossipLAN string
	// GossipWAN is the HOST:PORT of the serf WAN pool across regions. Empty: this node does
	// not join the WAN pool (and has no links to other regions).
	GossipWAN string
	// GossipAdvertiseLAN and GossipAdvertiseWAN are the IP:PORT other members reach the
	// pools at, when that is not the bound address (NAT, a cloud's public address that is
	// not on the host). Empty: the bound address.
	GossipAdvertiseLAN, GossipAdvertiseWAN string
	// Join and WANJoin are gossip addresses of nodes to join at start (LAN, WAN).
	Join, WANJoin []string
	// GossipKey is the 32-byte key that encrypts gossip. Nil: unencrypted (dev only; logged).
	GossipKey []byte
	// GossipProfile selects memberlist timers: gossip.ProfileDefault (LAN/WAN presets),
	// ProfileLocal, or ProfileTest (fast, for tests).
	GossipProfile gossip.Profile
	// Mirror lists topic patterns mirrored from every other region, whether or not a local
	// subscription wants them.
	Mirror []string
	// MirrorStallAfter is how long a mirror may carry no records while the origin reports
	// its head moving before it is reported stalled (federation.Config.StallAfter). Default
	// 30 s.
	MirrorStallAfter time.Duration
	// MirrorStreams bounds the mirror streams each link to another region keeps open at once
	// (federation.Config.MaxMirrorStreams): a mirror holds a stream only while its topic
	// moves; quiet ones park, and the origin's head reopens them. Default 1024.
	MirrorStreams int

	// AblationSharedStream accepts the shared-stream mapping (node/sharedstream): a client that
	// asks for it (the bench module, through bench/sharedstream; the SDK has no such API)
	// carries all its subscriptions on ONE stream instead of one stream each. Only the stream
	// mapping differs: the subscriptions are authorized, read, batched and acknowledged as
	// on streams of their own. A measurement aid for benchmarks (bench/, docs/benchmarks.md)
	// that isolates head-of-line blocking, never for production. Default false: such a
	// stream is refused with ERROR code 3 (forbidden).
	AblationSharedStream bool
	// AblationSharedLink selects the federation's shared-link stream mapping: all mirrors of
	// each link to another region on ONE QUIC stream instead of one stream per mirrored
	// topic, and the same accepted from peers. A measurement aid (federation/ablation.go,
	// scenario 6 in docs/benchmarks.md), never for production; only the mapping differs,
	// every check and the mirror core are the product's. Default false: a peer's request is
	// refused.
	AblationSharedLink bool

	// AdminAPI serves the admin API's state-changing endpoints from AdminHandler: POST
	// /v1/links/migrate and POST /v1/gossip/keys/{install,use,remove}. Default false: they
	// answer 403 naming `quicmq node --admin-api` (config key admin_api); /metrics and the
	// read-only GETs (members, links, gossip key fingerprints) are served either way.
	AdminAPI bool
	// MigrateTimeout bounds one POST /v1/links/migrate (probing and switching every link).
	// Default 15 s.
	MigrateTimeout time.Duration
	// ManageTimeout bounds a management request (consumers, topic create/purge/delete) that
	// this node passes on to the other nodes of its region, per node asked, and the answer to
	// a durable's lock asked of its home node (not a standby's wait). Default 10 s.
	ManageTimeout time.Duration

	// Retention applies to every topic. Zero: keep forever.
	Retention wal.Retention
	// RetentionInterval is how often retention deletes what Retention no longer keeps: a
	// record lives up to Retention.MaxAge plus this, and a topic may exceed
	// Retention.MaxBytes by what is appended in this time. Default 1 minute
	// (wal.DefaultRetentionInterval); negative: retention never runs on its own.
	RetentionInterval time.Duration
	// MaxSeriesPerMetric caps the label sets of each per-subscription metric (further
	// subscriptions are counted under pattern "_other") and the topics of the per-topic
	// publish metrics (further topics are counted under topic "_other"). Default 1000.
	MaxSeriesPerMetric int

	// Logger receives the node's logs. Default: slog.Default().
	Logger *slog.Logger
	// Registerer receives the node's metrics. Default: a new registry, returned by Registry.
	Registerer prometheus.Registerer
	// FS is the filesystem of the Pebble store; nil is the disk. Tests pass crash-simulating
	// filesystems.
	FS vfs.FS
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Timeline, if not nil, records the store's and the raft engine's events (syncs,
	// rounds, a catch-up's chunks, Pebble's flushes, compactions and stalls) for laying a
	// latency episode beside them (internal/timeline; `quicmq node --pprof` serves it).
	// nil: nothing recorded.
	Timeline *timeline.Recorder

	// noFeatures, for tests, has the node announce no features in gossip (FeaturesTag), as
	// a build older than them does.
	noFeatures bool
	// holdAppend, for tests, may return a channel for a batch of publishes to topic whose
	// append completed: its answer waits until the channel closes, as if the topic's group
	// stalled (a leadership hand-off).
	holdAppend func(topic string) <-chan struct{}
	// maxVersion, for tests, caps the client protocol version the node answers HELLO with
	// (0: wire.Version), so a test can stand for a node of an older build (one before version
	// 5 reads no PUBLISH_MULTI).
	maxVersion uint64
}

// nameRE is the grammar of node, region and durable consumer names: the topic token grammar.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func (c Config) withDefaults() Config {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:7400"
	}
	if c.Name == "" {
		if h, err := os.Hostname(); err == nil && nameRE.MatchString(h) {
			c.Name = h
		} else {
			c.Name = "node"
		}
	}
	if c.Region == "" {
		c.Region = "local"
	}
	if c.CADir == "" && c.DataDir != "" {
		c.CADir = c.DataDir + "/tls"
	}
	setDefault(&c.MaxPayload, 1<<20)
	setDefault(&c.MaxHeaderBytes, 16<<10)
	setDefault(&c.MaxStreamsPerConn, 2048)
	setDefault(&c.MaxSubscriptionsPerConn, 1024)
	setDefault(&c.MaxConnsPerTenant, 1000)
	setDefault(&c.MaxDurablesPerTenant, 1000)
	setDefault(&c.MaxPendingPublishes, 4096)
	setDefault(&c.StreamWindow, 1<<20)
	setDefault(&c.ConnWindow, 16<<20)
	setDefault(&c.ReadAhead, 256<<10)
	c.Groups.WithDefaults()
	setDefault(&c.Replicas, 1)
	c.Raft = c.Raft.withDefaults()
	setDefault(&c.TailRecords, 1024)
	setDefault(&c.TailBytes, 256<<10)
	setDefault(&c.MaxSeriesPerMetric, 1000)
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 5 * time.Second
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 30 * time.Second
	}
	if c.ClientPathInterval <= 0 {
		c.ClientPathInterval = time.Second
	}
	if c.ManageTimeout <= 0 {
		c.ManageTimeout = 10 * time.Second
	}
	if c.MigrateTimeout <= 0 {
		c.MigrateTimeout = 15 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func setDefault(v *int, d int) {
	if *v == 0 {
		*v = d
	}
}

// Validate reports every problem of the configuration at once.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("node: config: "+format, args...)) }
	if c.DataDir == "" {
		bad("DataDir is required (where the log and certificates live)")
	}
	if c.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Listen); err != nil {
			bad("Listen %q: want HOST:PORT: %v", c.Listen, err)
		}
	}
	if c.Name != "" && !nameRE.MatchString(c.Name) {
		bad("Name %q: want 1-64 characters of [A-Za-z0-9_-]", c.Name)
	}
	if c.Region != "" && !nameRE.MatchString(c.Region) {
		bad("Region %q: want 1-64 characters of [A-Za-z0-9_-]", c.Region)
	}
	for i, t := range c.Tokens {
		if len(t) < 16 {
			bad("Tokens[%d]: at least 16 characters, got %d", i, len(t))
		}
	}
	seen := make(map[string]bool)
	for i, cr := range c.Credentials {
		if err := cr.Validate(); err != nil {
			bad("Credentials[%d]: %v", i, err)
		}
		key := "token:" + cr.Token
		if cr.Subject != "" {
			key = "subject:" + cr.Subject
		}
		if seen[key] {
			bad("Credentials[%d]: the same token or subject is given twice", i)
		}
		seen[key] = true
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"MaxPayload", c.MaxPayload}, {"MaxHeaderBytes", c.MaxHeaderBytes},
		{"MaxStreamsPerConn", c.MaxStreamsPerConn}, {"MaxSubscriptionsPerConn", c.MaxSubscriptionsPerConn},
		{"MaxPendingPublishes", c.MaxPendingPublishes}, {"StreamWindow", c.StreamWindow},
		{"ConnWindow", c.ConnWindow}, {"ReadAhead", c.ReadAhead}, {"TailBytes", c.TailBytes}, {"MaxSeriesPerMetric", c.MaxSeriesPerMetric},
		{"MaxConnsPerTenant", c.MaxConnsPerTenant}, {"MaxDurablesPerTenant", c.MaxDurablesPerTenant}, {"MirrorStreams", c.MirrorStreams},
	} {
		if f.v < 0 {
			bad("%s must not be negative, got %d", f.name, f.v)
		}
	}
	if c.MaxPayload > 64<<20 {
		bad("MaxPayload %d over the 64 MiB the protocol allows", c.MaxPayload)
	}
	if c.StreamWindow > 0 && c.ConnWindow > 0 && c.StreamWindow > c.ConnWindow {
		bad("StreamWindow %d larger than ConnWindow %d", c.StreamWindow, c.ConnWindow)
	}
	if c.MaxSubscriptionsPerConn > 0 && c.MaxStreamsPerConn > 0 && c.MaxSubscriptionsPerConn > c.MaxStreamsPerConn {
		bad("MaxSubscriptionsPerConn %d larger than MaxStreamsPerConn %d", c.MaxSubscriptionsPerConn, c.MaxStreamsPerConn)
	}
	if c.Advertise != "" {
		if _, _, err := net.SplitHostPort(c.Advertise); err != nil {
			bad("Advertise %q: want HOST:PORT: %v", c.Advertise, err)
		}
	}
	if c.GossipWAN != "" && c.GossipLAN == "" {
		bad("GossipWAN needs GossipLAN: a node joins its region's pool first")
	}
	if c.GossipKey != nil && len(c.GossipKey) != 32 {
		bad("GossipKey: want 32 bytes, got %d", len(c.GossipKey))
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		bad("CertFile and KeyFile go together: got only one")
	}
	if c.TLS != nil && (c.CertFile != "" || c.CABundle != "") {
		bad("TLS excludes CertFile, KeyFile and CABundle")
	}
	if c.TLS != nil && c.GossipLAN != "" {
		bad("TLS and GossipLAN: links between nodes need the mesh CA in CADir; leave TLS unset")
	}
	for _, p := range c.Mirror {
		if err := routing.ValidatePattern(p); err != nil {
			bad("Mirror: %v", err)
		}
	}
	if c.Retention.MaxAge < 0 || c.Retention.MaxBytes < 0 {
		bad("Retention must not be negative")
	}
	errs = append(errs, c.Groups.Validate()...)
	errs = append(errs, c.validateReplicas()...)
	return errors.Join(errs...)
}
