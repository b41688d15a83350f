package node

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/qlog"

	"github.com/quicmq/quicmq/federation"
	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"
	"github.com/quicmq/quicmq/node/features"
	"github.com/quicmq/quicmq/node/groups"
	"github.com/quicmq/quicmq/node/manage"
	"github.com/quicmq/quicmq/node/placement"
	"github.com/quicmq/quicmq/node/subscriptions"
	"github.com/quicmq/quicmq/node/tail"
	"github.com/quicmq/quicmq/routing"
	"github.com/quicmq/quicmq/wal"
)

// Node is one broker node. New binds its socket and opens its log; Run serves until its
// context ends or Close is called; Close stops it gracefully and waits for every goroutine.
type Node struct {
	cfg     Config
	log     *slog.Logger
	reg     prometheus.Registerer
	gather  prometheus.Gatherer // set when the node made its own registry
	metrics *metrics
	paths   *clientPaths // client connections whose address changed (clientpaths.go)
	wal     *wal.Log
	tails   *tail.Set // the topics' shared tails and their fanouts (node/tail)
	udp     *net.UDPConn
	tr      *quic.Transport
	ln      *quic.Listener
	caFile  string
	limits  wire.Limits      // for decoding what clients send
	creds   auth.Credentials // tokens and client certificates; empty: anonymous

	// interest maps subscription patterns to the subscriptions that want to hear of new
	// topics. Owned by no goroutine: routing.Table is safe for concurrent use.
	interest *routing.Table[*subscriptions.Subscription]
	// wild is the wildcard subscriptions that read by sweep (node/subscriptions), told of
	// every advance of the log's high-watermarks.
	wild   *subscriptions.WildSet
	subs   *subscriptions.Host  // the node as its subscriptions see it, and the live ones (subhost.go)
	cons   consumers            // live consumer groups (durables.go, groups.go)
	locks  *subscriptions.Locks // exclusive durables held here, or at their home (durables.go)
	groups *groups.Env          // what the live groups need of the node (groups.go)
	here   *manage.Here         // this node's side of management (manage.go)

	gossip *gossip.Gossip         // nil without GossipLAN
	fed    *federation.Federation // links to the other nodes of the mesh; nil without GossipLAN
	place  *placement.Table       // which node of the region owns which topic; nil without GossipLAN
	rep    *replicated            // replicated topics (Config.Replicas > 1); nil otherwise
	topics subscriptions.Region   // where the region keeps a topic (subhost.go): chosen once in New, never nil after it
	raftID uint64                 // this node's raft ID, with Replicas > 1
	// meshTags are the gossip tags the node announces (SetTags replaces them all); tagMu
	// serializes their changes (setMeshTag).
	meshTags map[string]string
	tagMu    sync.Mutex

	stop      chan struct{} // closed by Close: every session drains
	stopOnce  sync.Once
	runDone   chan struct{} // closed when Run returns
	runMu     sync.Mutex
	running   bool
	closeOnce sync.Once
	closeErr  error
	abrupt    atomic.Bool    // StopAbruptly: the next stop skips the hand-off and gossip's leave
	wg        sync.WaitGroup // sessions and the topic watcher

	mu struct {
		sync.Mutex
		sessions map[*session]struct{}
		tenants  map[string]int // open client connections per tenant
	}
}

// New validates cfg, opens the log in DataDir/log, prepares TLS and binds the UDP socket.
// It starts no goroutine of its own (the log's committer belongs to the log).
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	n := &Node{
		cfg:      cfg,
		log:      cfg.Logger.With("node", cfg.Name, "region", cfg.Region),
		reg:      cfg.Registerer,
		interest: routing.NewTable[*subscriptions.Subscription](),
		wild:     subscriptions.NewWildSet(),
		stop:     make(chan struct{}),
		runDone:  make(chan struct{}),
	}
	n.locks = n.newLocks()
	n.mu.sessions = make(map[*session]struct{})
	n.mu.tenants = make(map[string]int)
	if n.reg == nil {
		r := prometheus.NewRegistry()
		n.reg, n.gather = r, r
	} else if g, ok := n.reg.(prometheus.Gatherer); ok {
		n.gather = g
	}
	for _, t := range cfg.Tokens {
		n.creds = append(n.creds, auth.Credential{Token: t})
	}
	n.creds = append(n.creds, cfg.Credentials...)
	// The decoder lets payloads and headers up to the frame size through so that an
	// over-large one gets a PUBLISH_ERROR naming the sizes (checkPublish), not a protocol
	// error that kills the stream; the frame cap still bounds every allocation. The other
	// per-publish limits refuse one publish in the decoder (wire.Publish.Refused).
	frame := cfg.MaxPayload + cfg.MaxHeaderBytes + 64<<10
	n.limits = wire.Limits{MaxFrame: frame, MaxPayload: frame, MaxHeaderBytes: frame, MaxTopic: routing.MaxTopicLen}.WithDefaults()

	tlsSet, err := n.setupTLS()
	if err != nil {
		return nil, err
	}
	n.metrics = newMetrics(n.reg, cfg.MaxSeriesPerMetric)
	n.paths = newClientPaths(n.reg, cfg.ClientPathInterval, n.log)
	consumers := func() ([]manage.Consumer, *wire.Error) {
		if n.here == nil {
			return nil, nil // New failed before it made it; a scrape may still come
		}
		return n.here.Consumers(auth.Everything, "")
	}
	n.reg.MustRegister(newLagCollector(n), manage.NewCollector(consumers, n.cfg.Now, n.cfg.MaxSeriesPerMetric, n.log))
	n.wal, err = wal.Open(filepath.Join(cfg.DataDir, "log"), wal.Options{
		FS:         cfg.FS,
		Logger:     n.log,
		Registerer: n.reg,
		Now:        cfg.Now,
		Retention:  cfg.Retention,
		// A client never has more publishes in flight on a stream than the node accepts, so
		// every retry of an unanswered publish is still in its producer's window.
		DedupWindow: cfg.MaxPendingPublishes,
		// How often retention runs (docs/protocol.md, retention's schedule).
		RetentionInterval: cfg.RetentionInterval,
		Timeline:          cfg.Timeline,
	})
	if err != nil {
		return nil, fmt.Errorf("node: open log: %w", err)
	}
	n.wal.OnAdvance(n.wild.Advanced) // node/subscriptions: sweeps
	n.tails = tail.NewSet(n.wal, tail.Config{Records: cfg.TailRecords, Bytes: cfg.TailBytes,
		ReadAhead: cfg.ReadAhead, MaxRead: maxReadRecords, Region: cfg.Region})
	n.groups = n.newGroupEnv()
	n.tails.Register(n.reg)
	if cfg.Replicas > 1 {
		if n.raftID, err = federation.RaftNodeID(cfg.DataDir); err != nil {
			n.wal.Close()
			return nil, fmt.Errorf("node: %w", err)
		}
	}
	if err := n.listen(tlsSet.server); err != nil {
		n.wal.Close()
		return nil, err
	}
	if err := n.setupMesh(tlsSet); err != nil {
		n.closeSocket()
		n.wal.Close()
		return nil, err
	}
	if n.raftID != 0 {
		if n.rep, err = newReplicated(n, n.raftID); err != nil {
			n.gossip.Close()
			n.closeSocket()
			n.wal.Close()
			return nil, err
		}
	}
	n.topics = n.newRegion()
	n.groups.Where = n.newGroupWhere()
	n.subs = n.newSubHost()
	n.here = n.newHere()
	return n, nil
}

// setupMesh creates the gossip pools and the federation when configured. Gossip binds its
// ports here (serf starts its own goroutines on creation); Run serves both.
func (n *Node) setupMesh(t *tlsSetup) error {
	c := n.cfg
	if c.GossipLAN == "" {
		return nil
	}
	tags := map[string]string{tagQUIC: n.advertise(), features.Tag: localFeatures().String()}
	if c.noFeatures {
		delete(tags, features.Tag) // a node of a release before the tag, for tests
	}
	if n.raftID != 0 {
		tags[tagRaft] = strconv.FormatUint(n.raftID, 10)
	}
	n.meshTags = tags
	g, err := gossip.New(gossip.Config{
		Name: c.Name, Region: c.Region,
		LANAddr: c.GossipLAN, WANAddr: c.GossipWAN,
		AdvertiseLAN: c.GossipAdvertiseLAN, AdvertiseWAN: c.GossipAdvertiseWAN,
		Key:        c.GossipKey,
		Tags:       tags,
		Profile:    c.GossipProfile,
		Logger:     c.Logger, // gossip names the node and region itself
		Registerer: n.reg,
	})
	if err != nil {
		return fmt.Errorf("node: gossip: %w", err)
	}
	n.gossip = g
	n.place = placement.New(placement.Config{
		Name: c.Name, Region: c.Region, Replicated: c.Replicas > 1,
		Log: n.log, Gossip: g,
		HasLog:           func(topic string) bool { _, _, ok := n.wal.Bounds(topic); return ok },
		MirrorReplicated: func(topic string) bool { return n.rep.shouldMirror(topic) },
		// The federation and the replicated path are made after placement, which they use.
		Resync: func() {
			if n.fed != nil {
				n.fed.Resync()
			}
		},
		Connected: func(name string) bool { return n.fed.Connected(name) },
	}, n.reg)
	n.fed, err = federation.New(federation.Config{
		Region: c.Region, Name: c.Name,
		Log:              n.wal,
		TLS:              t.peer,
		Peers:            n.peers,
		Mirror:           c.Mirror,
		StallAfter:       c.MirrorStallAfter,
		MaxMirrorStreams: c.MirrorStreams,
		MaxMirrorSeries:  c.MaxSeriesPerMetric,
		ShouldMirror:     n.place.ShouldMirror,
		OnCatalog:        n.place.OnCatalog,
		OnCatalogSynced:  n.place.OnCatalogSynced,
		Logger:           n.log,
		Registerer:       n.reg,
		Now:              c.Now,
		Raft:             federation.RaftConfig{ID: n.raftID, Deliver: n.deliverRaft, Fetch: n.fetchRaft},
		MirrorAppend:     n.mirrorAppend(),
		MirrorPosition:   n.mirrorPosition(), // replpos.go
		MirrorGroup:      n.mirrorGroup(),
		MirrorWanted:     n.mirrorWanted(),
		CatchupEnded:     n.releaseHeap, // heaprelease.go
		OwnHeads: func(peerRegion string) bool {
			ok, _ := n.LinkKnows(peerRegion, features.Catalog, 1)
			return ok
		},

		AblationSharedLink: c.AblationSharedLink,
		// A replicated region's metadata group places its topics: no reader here needs the
		// topics a sibling holds (conflicts, ShouldMirror and the listing's rows go by
		// raft's placement), and each creation is no longer streamed to every other node.
		NoLocalCatalog: c.Replicas > 1,
	})
	if err != nil {
		g.Close()
		return fmt.Errorf("node: federation: %w", err)
	}
	return nil
}

// tagQUIC is the gossip tag holding a node's QUIC address.
const tagQUIC = "quic"

func (n *Node) advertise() string {
	if n.cfg.Advertise != "" {
		return n.cfg.Advertise
	}
	return n.Addr().String()
}

// peers lists the other nodes of the mesh that have not left, for the federation's links:
// other regions' nodes (mirroring) and this region's (placement catalogs and relays). A node
// gossip declares failed is listed as such: its link is kept only while the link's QUIC
// connection lives (a peer that died falls silent, and the link's liveness watch ends the
// connection within LinkIdleTimeout; streams relayed to it then end with an error naming
// it), and no link is dialed to it until gossip sees it alive again. So gossip's late
// verdict after a cut (its suspicion outlasts the cut by seconds) does not replace a
// working link, which would cost both sides a listing of every topic.
func (n *Node) peers() []federation.Peer {
	var out []federation.Peer
	for _, m := range n.gossip.Members() {
		if m.Name == n.cfg.Name || m.Region == "" || m.Tags[tagQUIC] == "" {
			continue
		}
		if m.Status != gossip.StatusAlive && m.Status != gossip.StatusFailed {
			continue // left, leaving or unknown: gone
		}
		out = append(out, federation.Peer{Region: m.Region, Name: m.Name, Addr: m.Tags[tagQUIC], RaftID: raftPeerID(m),
			Failed: m.Status == gossip.StatusFailed})
	}
	return out
}

// Gossip is the node's gossip (nil for a standalone node); Federation its links (nil without
// a WAN pool).
func (n *Node) Gossip() *gossip.Gossip             { return n.gossip }
func (n *Node) Federation() *federation.Federation { return n.fed }

func (n *Node) listen(tlsConf *tls.Config) error {
	addr, err := net.ResolveUDPAddr("udp", n.cfg.Listen)
	if err != nil {
		return fmt.Errorf("node: listen %s: %w", n.cfg.Listen, err)
	}
	n.udp, err = net.ListenUDP("udp", addr)
	if err != nil {
		return fmt.Errorf("node: listen %s: %w", n.cfg.Listen, err)
	}
	key, err := statelessResetKey(n.cfg.DataDir)
	if err != nil {
		n.udp.Close()
		return err
	}
	// With the same key across restarts, a restarted node answers packets of its
	// predecessor's connections with a stateless reset, so clients and peers notice at once
	// instead of after their idle timeout.
	n.tr = &quic.Transport{Conn: n.udp, StatelessResetKey: key}
	n.ln, err = n.tr.Listen(tlsConf, n.quicConfig())
	if err != nil {
		n.closeSocket()
		return fmt.Errorf("node: listen %s: %w", n.cfg.Listen, err)
	}
	return nil
}

func (n *Node) quicConfig() *quic.Config {
	c := n.cfg
	return &quic.Config{
		MaxIncomingStreams:             int64(c.MaxStreamsPerConn),
		MaxIncomingUniStreams:          -1, // the protocol uses bidirectional streams only
		InitialStreamReceiveWindow:     uint64(min(c.StreamWindow, 256<<10)),
		MaxStreamReceiveWindow:         uint64(c.StreamWindow),
		InitialConnectionReceiveWindow: uint64(min(c.ConnWindow, 1<<20)),
		MaxConnectionReceiveWindow:     uint64(c.ConnWindow),
		MaxIdleTimeout:                 c.IdleTimeout,
		KeepAlivePeriod:                c.IdleTimeout / 3,
		HandshakeIdleTimeout:           c.HandshakeTimeout,
		Tracer:                         qlog.DefaultConnectionTracer, // a qlog file per connection when QLOGDIR is set
	}
}

// Addr is the bound UDP address of the client listener (right after New).
func (n *Node) Addr() net.Addr { return n.udp.LocalAddr() }

// CAFile is the PEM file of the CA that clients should trust, when the node generated its
// own TLS material; "" when Config.TLS was given.
func (n *Node) CAFile() string { return n.caFile }

// Name and Region are the node's identity.
func (n *Node) Name() string   { return n.cfg.Name }
func (n *Node) Region() string { return n.cfg.Region }

// Serving reports whether the node serves every kind of request: in a replicated region,
// once its metadata group has a leader (before that a new topic cannot be placed: its
// publishes and subscriptions answer unavailable, retry); a single-copy node serves once it
// runs.
func (n *Node) Serving() bool { return n.rep.serving() }

// Gatherer returns the registry the node's metrics are on, for serving /metrics; nil when
// the configured Registerer is not also a Gatherer.
func (n *Node) Gatherer() prometheus.Gatherer { return n.gather }

// Log returns the node's topic log (for tests and tools in this module).
func (n *Node) Log() *wal.Log { return n.wal }

// Run accepts connections until ctx ends or Close is called, then shuts down gracefully:
// no new connections or publishes are taken, pending publishes are answered, subscriptions
// are told the node is shutting down. It returns when every goroutine has exited.
func (n *Node) Run(ctx context.Context) error {
	n.runMu.Lock()
	if n.running {
		n.runMu.Unlock()
		return errors.New("node: Run called twice or after Close")
	}
	n.running = true
	n.runMu.Unlock()
	defer close(n.runDone)

	n.log.Info("node listening", "addr", n.Addr().String(), "ca", n.caFile, "anonymous", len(n.creds) == 0)
	if len(n.creds) == 0 {
		n.log.Warn("no client tokens configured: ANY client that trusts the CA can publish and subscribe (anonymous mode)")
	}

	n.wg.Add(1)
	go n.watchTopics()
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.paths.run(n.stop) }()
	meshCtx, stopMesh := context.WithCancel(context.Background())
	defer stopMesh()
	meshDone := n.runMesh(meshCtx)

	acceptErr := make(chan error, 1)
	go func() { acceptErr <- n.acceptLoop() }() // ends when the listener closes below
	var err error
	select {
	case <-ctx.Done():
	case <-n.stop:
	case err = <-acceptErr:
	}
	if n.rep != nil && err == nil && !n.abrupt.Load() {
		// Leaderships move first (node/relocate), bounded by Raft.StopHandOff: publishes then
		// wait a round trip for a new leader instead of an election timeout.
		if left := n.rep.reloc.HandOff(context.Background()); left > 0 {
			n.log.Warn("stopping while still leading raft groups: no other replica could take them in time", "groups", left)
		}
	}
	// Client sessions drain first, while the links are up: a publish this node relays to its
	// topic's owner in the region is answered by the owner, not refused for a link that
	// shutting down took away. Then the links stop and gossip leaves gracefully.
	n.shutdown()
	if n.gossip != nil && n.abrupt.Load() {
		n.gossip.CloseAbruptly() // its Run, under runMesh, then returns at once
	}
	stopMesh()
	meshDone.Wait()
	if e := <-acceptErr; err == nil && !errors.Is(e, quic.ErrServerClosed) && !errors.Is(e, net.ErrClosed) {
		err = e
	}
	n.wg.Wait()
	if cerr := n.wal.Close(); err == nil {
		err = cerr
	}
	n.closeSocket()
	return err
}

func (n *Node) acceptLoop() error {
	for {
		conn, err := n.ln.Accept(context.Background())
		if err != nil {
			return err
		}
		s := newSession(n, conn)
		n.mu.Lock()
		select {
		case <-n.stop:
			n.mu.Unlock()
			conn.CloseWithError(wire.AppShutdown, "shutting down")
			continue
		default:
		}
		n.mu.sessions[s] = struct{}{}
		n.wg.Add(1)
		n.mu.Unlock()
		n.paths.add(conn)
		go func() {
			defer n.wg.Done()
			s.run()
			n.paths.remove(conn)
			n.mu.Lock()
			delete(n.mu.sessions, s)
			n.mu.Unlock()
		}()
	}
}

// shutdown stops accepting and drains every session: publish streams answer what they
// have read, subscriptions end with ERROR shutting-down. Sessions that do not finish within
// ShutdownTimeout are closed hard; nothing acknowledged is lost either way (acks follow the
// fsync).
func (n *Node) shutdown() {
	n.stopOnce.Do(func() { close(n.stop) })
	n.ln.Close()
	n.mu.Lock()
	sessions := make([]*session, 0, len(n.mu.sessions))
	for s := range n.mu.sessions {
		sessions = append(sessions, s)
	}
	n.mu.Unlock()
	done := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for _, s := range sessions {
			wg.Add(1)
			go func() { defer wg.Done(); s.drain() }()
		}
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(n.cfg.ShutdownTimeout):
		n.log.Warn("shutdown timeout: closing connections with work pending", "timeout", n.cfg.ShutdownTimeout)
	}
	for _, s := range sessions {
		s.conn.CloseWithError(wire.AppShutdown, "node shutting down")
	}
	<-done
}

// Close stops the node and waits until Run has returned (if it was started) and the log is
// closed. It is safe to call more than once.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.stopOnce.Do(func() { close(n.stop) })
		n.runMu.Lock()
		running := n.running
		n.running = true // a Run after Close fails
		n.runMu.Unlock()
		if running {
			<-n.runDone
			return
		}
		n.ln.Close()
		if n.gossip != nil && n.abrupt.Load() {
			n.gossip.CloseAbruptly()
		} else if n.gossip != nil {
			n.gossip.Close()
		}
		n.closeErr = n.wal.Close()
		n.closeSocket()
	})
	return n.closeErr
}

// StopAbruptly makes the node's stop (Run's context ending, or Close), now or later, skip
// what a graceful stop does only for the peers that keep running: raft leaderships are not
// handed off first, and the node leaves gossip as a crashed one would (peers notice a
// failure). Sessions still drain, every goroutine is joined and the log is closed. It is
// for a test's teardown, where every node stops and the leave would cost up to
// gossip.Config.LeaveTimeout per node; nothing in the CLI calls it. It does not stop the
// node itself. Safe from any goroutine.
func (n *Node) StopAbruptly() { n.abrupt.Store(true) }

// joinPool joins a gossip pool through addrs, and when none answers keeps trying in the
// background (1 s, doubling up to 30 s) until one does: a node started before every node it
// names (the first region of a deployment, whose wan_join names regions not up yet) would
// otherwise be in the pool only if another node happened to name it.
func (n *Node) joinPool(ctx context.Context, wg *sync.WaitGroup, pool string, addrs []string, join func([]string) (int, error)) {
	_, err := join(addrs)
	if err == nil {
		return
	}
	n.log.Warn("could not join "+pool+"; retrying in the background until one of its addresses answers", "addrs", addrs, "err", err)
	wg.Add(1)
	go func() {
		defer wg.Done()
		backoff := time.Second
		for attempt := 1; ; attempt++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			if _, err := join(addrs); err == nil {
				n.log.Info("joined "+pool, "addrs", addrs, "attempts", attempt+1)
				return
			} else if attempt%10 == 0 {
				n.log.Warn("still cannot join "+pool+"; retrying", "addrs", addrs, "err", err)
			}
			backoff = min(2*backoff, 30*time.Second)
		}
	}()
}

// runMesh starts gossip (joining the configured addresses) and the federation, and feeds
// gossip events to the federation. The returned group is done when all have stopped.
func (n *Node) runMesh(ctx context.Context) *sync.WaitGroup {
	var wg sync.WaitGroup
	if n.gossip == nil {
		return &wg
	}
	g := n.gossip
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := g.Run(ctx); err != nil {
			n.log.Warn("gossip stopped", "err", err)
		}
	}()
	if len(n.cfg.Join) > 0 {
		n.joinPool(ctx, &wg, "the region's gossip pool", n.cfg.Join, g.JoinLAN)
	}
	if len(n.cfg.WANJoin) > 0 && n.cfg.GossipWAN != "" {
		n.joinPool(ctx, &wg, "the WAN gossip pool", n.cfg.WANJoin, g.JoinWAN)
	}
	if n.fed == nil {
		return &wg
	}
	events := make(chan gossip.Event, 64)
	cancel := g.Subscribe(events)
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer cancel()
		for {
			select {
			case <-ctx.Done():
				return
			case <-events:
				n.fed.PeersChanged()
				n.place.MembersChanged()
				if n.rep != nil {
					n.rep.wakeFailed(ctx)
				}
			}
		}
	}()
	go func() {
		defer wg.Done()
		n.fed.Run(ctx)
	}()
	if n.rep != nil {
		n.rep.start(ctx, &wg)
	}
	return &wg
}

// MetricsHandler serves the node's metrics in the Prometheus text and OpenMetrics formats.
func (n *Node) MetricsHandler() http.Handler {
	if n.gather == nil {
		return http.NotFoundHandler()
	}
	return promhttp.HandlerFor(n.gather, promhttp.HandlerOpts{EnableOpenMetrics: true})
}

// statelessResetKey loads the node's stateless reset key from DATA/reset.key, creating it
// (32 random bytes, mode 0600) on first start. It must stay secret: anyone holding it can end
// the node's connections.
func statelessResetKey(dataDir string) (*quic.StatelessResetKey, error) {
	file := filepath.Join(dataDir, "reset.key")
	var key quic.StatelessResetKey
	b, err := os.ReadFile(file)
	switch {
	case err == nil && len(b) == len(key):
		copy(key[:], b)
		return &key, nil
	case err == nil:
		return nil, fmt.Errorf("node: %s holds %d bytes, want %d: remove it and a new key is made", file, len(b), len(key))
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("node: stateless reset key: %w", err)
	}
	if _, err := rand.Read(key[:]); err != nil {
		return nil, fmt.Errorf("node: stateless reset key: %w", err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("node: stateless reset key: %w", err)
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, key[:], 0o600); err != nil {
		return nil, fmt.Errorf("node: stateless reset key: %w", err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return nil, fmt.Errorf("node: stateless reset key: %w", err)
	}
	return &key, nil
}

// closeSocket closes the listener's transport and its socket (quic-go leaves a socket it was
// given open).
func (n *Node) closeSocket() {
	n.tr.Close()
	n.udp.Close()
}

// Conflicts returns the topics with a log on more than one node of this region, with their
// holders.
func (n *Node) Conflicts() map[string][]string {
	if n.place == nil {
		return nil
	}
	return n.place.Conflicts()
}
