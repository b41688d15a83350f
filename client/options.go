package client

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/qlog"

	"github.com/quicmq/quicmq/internal/liveness"
	"github.com/quicmq/quicmq/internal/wire"
)

// Options configure a Conn. The zero value works against a node whose certificate the
// system trusts and that requires no token.
type Options struct {
	// Addrs are the nodes of one region to dial ("host:port" each), in order, when Dial is
	// given no address. Default none.
	Addrs []string
	// Failover are nodes of other regions ("host:port" each), in order, to move to when every
	// node of the home region (the addresses Dial was given) is unreachable: Dial tries them
	// when no home node answers, and with Reconnect so does each reconnect, after one pass
	// over the home nodes. Subscriptions made again there resume with their vector position
	// (Subscription.Position), so no record is delivered twice or skipped, each origin
	// region's records in order; publishes there are that region's records (see failover.go
	// for what a resent idempotent publish means across regions). Each reconnect tries the
	// home nodes first. Stats counts the moves. Default none: a Conn stays in its region.
	Failover []string
	// FailbackCheck is how often a Conn connected to a Failover node (with Reconnect) dials
	// its home nodes: as soon as one answers, the Conn waits up to a second for the
	// publishes in flight to be answered, moves back home and closes the failover
	// connection; subscriptions resume at home with their vector positions (failover.go).
	// A publish made during that second may still be in flight at the move and fail as on a
	// lost connection (Idempotent resends it). A home node that is still down refuses the
	// dial within a round trip. Default 500 ms; negative: stay on the failover node until it
	// is lost.
	FailbackCheck time.Duration
	// CAFile is a PEM bundle of the certificate authorities to trust for the node's
	// certificate: the ca.pem `quicmq dev` prints (/tmp/quicmq-dev-XXXX/ca/ca.pem, or
	// DIR/ca/ca.pem with --data DIR), or DATA/tls/ca.pem of a node that generated its own
	// CA. It replaces TLSConfig.RootCAs when both are set. Empty: TLSConfig's roots, or the system's.
	CAFile string
	// CertFile and KeyFile are a client certificate and its private key (PEM files, such as
	// client.pem and client-key.pem from `quicmq certs client`), presented in the TLS
	// handshake to a node that authenticates clients by certificate: the node maps the
	// certificate's Common Name to a credential (and its tenant) without a token. Both or
	// neither; they replace TLSConfig.Certificates when set. Empty: no client certificate
	// (unless TLSConfig has one).
	CertFile string
	KeyFile  string
	// TLSConfig is the base TLS configuration (roots, client certificates, ServerName). Dial
	// copies it and enforces TLS 1.3 and the ALPN "quicmq/1". ServerName defaults to the host
	// part of the address.
	TLSConfig *tls.Config
	// Token is sent in HELLO; a node that requires tokens refuses a connection without a
	// valid one (an *Error with CodeUnauthorized).
	Token string
	// Name identifies the client in the node's logs. Default "quicmq-go".
	Name string
	// KeepAlive is the period of QUIC keep-alive PINGs, which keep an idle connection alive
	// and draw the node's answers by which the Conn knows the node is there. It must be
	// shorter than IdleTimeout (quic-go uses at most half of it). Default IdleTimeout/2 (1 s);
	// negative disables keep-alives (the node's own PINGs then keep an idle connection up).
	KeepAlive time.Duration
	// IdleTimeout is how long the connection may go without any packet from the node (with
	// a packet sent to it unanswered for half of that, at the default KeepAlive) before it is
	// taken as lost: a node that died or was cut off is noticed within this long, on an
	// idle connection as with records in flight, and with Reconnect the Conn dials again
	// (Failover included). Silence is counted from the last packet or from the end of the
	// last pause of this process, whichever is later: while the process's goroutines wait
	// to run (a long garbage collection on a busy machine), packets wait unread in its
	// sockets, and the silence is its own. The connection's QUIC idle timeout, which knows
	// nothing of pauses, is twice IdleTimeout (the shorter of the client's and the node's
	// applies): it ends the connection only in a process starved for that long. A node that
	// restarted is noticed sooner: once it has
	// been silent for 1.5 KeepAlive, the Conn sends reset probes, packets large enough that
	// the restarted node answers them with the stateless reset that ends the old connection.
	// A healthy node answers every keep-alive within a round trip, so the default tolerates
	// several lost packets in a row (QUIC resends an unanswered PING after a probe timeout,
	// doubling); on a lossy long-distance path, raise it. It is never shorter than three of
	// the path's probe timeouts. Default 2 s.
	IdleTimeout time.Duration
	// MigrateCheck is how often the Conn looks up which local address the host's routes
	// choose to reach its node. When that address changed (an interface came up or went
	// away, an address changed: a laptop moving from one network to another), the Conn
	// migrates to a new socket (Conn.Migrate), keeping every stream and without a new
	// handshake. A NAT rebinding is not seen from the client; the node follows it on its own.
	// Default 5 s; negative: never (Conn.Migrate still works).
	MigrateCheck time.Duration
	// MigrateTimeout bounds the probe of a migration's new path: unanswered for this long,
	// the migration fails (and with Reconnect the Conn reconnects instead). Default 3 s.
	MigrateTimeout time.Duration
	// routeSource replaces the route lookup of MigrateCheck (tests: export_test.go).
	routeSource func(*net.UDPAddr) (string, error)
	// MaxPendingPublishes is the pipelining window: how many publishes may be unanswered at
	// once on the Conn. PublishAsync blocks while it is full. Default 1024; keep it below the
	// node's per-stream limit (4096 by default) so the node never has to stop reading.
	MaxPendingPublishes int
	// Reconnect makes the Conn dial its node again when the connection was lost (the node
	// restarted, the network failed): the next operation that needs a stream (a publish, a
	// subscription, a listing) dials first, within that operation's context, and open
	// subscriptions are made again by their next Next: a durable consumer from its stored
	// positions, a topic from the record after the last one delivered, start=latest from
	// when the subscription was set up (less a second for clocks), anything else from its
	// start; records already delivered are never delivered again. A subscription the node
	// ends as unavailable (CodeUnavailable: a durable's or a group's topic now led by another
	// node, an exclusive lock lost with the node that kept it) is made again the same way,
	// with the same backoff, until it is refused for good. Publishes awaiting their
	// ack when the connection was lost fail with an *OutcomeUnknownError (they may or may
	// not be stored: a retry without a producer may store a record twice); with Idempotent
	// too, they are sent again instead. Default false: a lost connection fails every later
	// operation and ends every subscription.
	Reconnect bool
	// Idempotent makes retried publishes be stored once. Dial picks a random producer ID
	// (16 random bytes, hex), and every publish whose Message has no ProducerID gets it and
	// the Conn's next Sequence (1, 2, 3, ... per Conn, so per topic the sequences increase,
	// with gaps). A node that already stored a publish with the same topic, producer and
	// sequence stores nothing and answers with the stored record's offset and time
	// (Ack.Duplicate). Messages with their own ProducerID and Sequence are de-duplicated
	// whether this is set or not.
	//
	// With Reconnect too, publishes awaiting their ack when the connection was lost (or the
	// node shut down, or ended the publish stream saying their outcome is unknown) are not
	// failed: they are sent again, in order and ahead of later publishes, on a new stream
	// (and connection, when it was lost), with the same producer and sequence, trying for ReconnectTimeout (with
	// the backoff subscriptions use to resume). Those the node had stored come back as
	// duplicates with their original offsets. Without Reconnect, such publishes fail with an
	// *OutcomeUnknownError naming their producer and sequence, with which a retry is safe.
	//
	// The node remembers the last 4096 sequences of each producer per topic for 10 minutes
	// (its de-duplication window): keep MaxPendingPublishes below that. Default false.
	Idempotent bool
	// ReconnectTimeout bounds how long (Idempotent and Reconnect) the publishes in flight
	// on a lost connection are resent before their Futures fail. Default 1 minute.
	ReconnectTimeout time.Duration

	// offer is the highest protocol version said in HELLO, 0 for wire.Version: set only
	// through internal/clienthook (OfferVersion), so benchmarks can compare versions.
	offer uint64
}

const (
	defaultIdleTimeout   = 2 * time.Second
	defaultFailbackCheck = 500 * time.Millisecond
	defaultMaxPending    = 1024
	defaultResendTime    = time.Minute
	defaultMigrateCheck  = 5 * time.Second
	defaultMigrateProbe  = 3 * time.Second
	defaultClientName    = "quicmq-go"
	closeDrainTimeout    = 2 * time.Second // how long Subscription.Close waits for the node's FIN
	streamWindow         = 512 << 10
	maxStreamWindow      = 2 << 20
	connectionWindow     = 64 << 20
	maxConnectionWindow  = 256 << 20
)

// withDefaults fills every zero field; it is the only place defaults live.
func (o Options) withDefaults() Options {
	if o.Name == "" {
		o.Name = defaultClientName
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = defaultIdleTimeout
	}
	if o.KeepAlive == 0 {
		o.KeepAlive = o.IdleTimeout / 2
	}
	if o.MaxPendingPublishes <= 0 {
		o.MaxPendingPublishes = defaultMaxPending
	}
	if o.ReconnectTimeout <= 0 {
		o.ReconnectTimeout = defaultResendTime
	}
	if o.FailbackCheck == 0 {
		o.FailbackCheck = defaultFailbackCheck
	}
	if o.MigrateCheck == 0 {
		o.MigrateCheck = defaultMigrateCheck
	}
	if o.MigrateTimeout <= 0 {
		o.MigrateTimeout = defaultMigrateProbe
	}
	if o.routeSource == nil {
		o.routeSource = routeSource
	}
	return o
}

// tlsConfig builds the handshake's TLS configuration without a server name: Dial clones it
// for each node, naming the node's host unless Options.TLSConfig named one.
func (o Options) tlsConfig() (*tls.Config, error) {
	conf := &tls.Config{}
	if o.TLSConfig != nil {
		conf = o.TLSConfig.Clone()
	}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("client: read CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client: CA file %s holds no PEM certificate", o.CAFile)
		}
		conf.RootCAs = pool
	}
	switch {
	case o.CertFile != "" && o.KeyFile == "":
		return nil, fmt.Errorf("client: client certificate %s: KeyFile is not set (a certificate needs its key: set both, or neither)", o.CertFile)
	case o.KeyFile != "" && o.CertFile == "":
		return nil, fmt.Errorf("client: client key %s: CertFile is not set (a key needs its certificate: set both, or neither)", o.KeyFile)
	case o.CertFile != "":
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("client: client certificate %s with key %s: %w", o.CertFile, o.KeyFile, err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	if conf.MinVersion < tls.VersionTLS13 {
		conf.MinVersion = tls.VersionTLS13
	}
	conf.NextProtos = []string{wire.ALPN}
	return conf, nil
}

// quicConfig is the connection's QUIC configuration. The node never opens streams, so none
// are accepted. Receive windows bound what the client buffers: per subscription stream at most
// maxStreamWindow, for the whole connection at most maxConnectionWindow. Unread data of a
// subscription the application does not read holds connection credit too, so the connection
// window is sized for 100 such stalled streams at their full window, and starts at
// connectionWindow, 128 streams at their first window: fewer stalled streams can never starve
// the others through connection-level flow control. It has to start there: quic-go widens a
// window only when it is used up within a few round trips, which stalled streams never do
// (and on a fast path, with a round trip under a millisecond, a busy one seldom does). A
// window is credit, not memory: the client holds only what the node has sent and the
// application has not read.
func (o Options) quicConfig() *quic.Config {
	keepAlive := o.KeepAlive
	if keepAlive < 0 {
		keepAlive = 0
	}
	return &quic.Config{
		KeepAlivePeriod:                keepAlive,
		MaxIdleTimeout:                 liveness.IdleTimeoutFor(o.IdleTimeout), // the watch decides first (watch.go)
		MaxIncomingStreams:             -1,
		MaxIncomingUniStreams:          -1,
		InitialStreamReceiveWindow:     streamWindow,
		MaxStreamReceiveWindow:         maxStreamWindow,
		InitialConnectionReceiveWindow: connectionWindow,
		MaxConnectionReceiveWindow:     maxConnectionWindow,
		Tracer:                         qlog.DefaultConnectionTracer, // a qlog file per connection when QLOGDIR is set
	}
}
