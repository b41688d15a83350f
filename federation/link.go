package federation

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/qlog"

	"github.com/quicmq/quicmq/internal/liveness"
	"github.com/quicmq/quicmq/internal/wire"
)

// appMigrationFailed closes a connection whose migration could not complete, so the link
// reconnects and resumes from its cursors.
const appMigrationFailed = 0x10

// link is this node's connection to one peer. Its run goroutine owns the connection's
// lifecycle and the set of mirror goroutines; other goroutines read its state under mu.
type link struct {
	f      *Federation
	peer   Peer
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc

	interestWake chan struct{}
	resync       atomic.Bool   // a Resync since the link's goroutine last applied the patterns (interestChanged)
	sched        chan struct{} // topics wait for a stream, or one was given back (park.go)
	redial       chan struct{} // the peer restarted: cut a back-off short (peerRestarted)
	counters     *linkCounters // the peer's, shared with the links to it before and after this one
	migrations   atomic.Uint64
	reconnects   atomic.Uint64
	silent       atomic.Uint64 // connections ended after LinkIdleTimeout without a packet
	// failed is gossip's verdict on the peer (Peer.Failed), set by reconcile while the
	// connection lives: once it ends, run ends too instead of redialing.
	failed atomic.Bool
	done   chan struct{} // closed when run returns

	mu struct {
		sync.Mutex
		conn       *quic.Conn
		transports []*quic.Transport // every socket the connection used: kept for its life
		probe      *liveness.Probe   // sees the packets of every socket of conn (reset probes)
		local      string            // the socket in use; quic-go's Conn.LocalAddr races with a path switch
		since      time.Time
		mirrors    map[string]*mirror // the open mirrors, each holding (or opening) a stream, until they ended
		opener     mirrorOpener       // the stream mapping on conn (nil on a link within the region)
		lastErr    string
		cancelDial context.CancelFunc // ends the dial in progress (nil when none)
		// health is every topic this link mirrors, open or parked, by topic: what the origin
		// reported of its head and how far the mirror scanned. It outlives the link's
		// connections and mirrors.
		health  map[string]*mirrorHealth
		stalled map[string]bool // topics reported stalled (stall.go)

		// The current connection's mirror scheduling (park.go).
		// conns numbers the link's connections (resetForConn): a mirrored topic the peer
		// announced on the current one has its health's announcedOn at conns.
		conns uint32
		// unwanted are the topics the peer announced on the current connection that this
		// link does not mirror (considerLocked): the only ones a pattern added to the
		// watched set can make mirrored (repattern).
		unwanted map[string]bool
		patterns *patternSet     // the watched patterns mirrors are decided by
		queue    backlog         // topics waiting for a stream, newest head first (stale entries are skipped; park.go)
		seq      uint64          // entries pushed to queue
		queued   map[string]bool // the topics waiting, in queue or moved
		// moved is the live lane: topics whose head the peer reported moving on this
		// connection, served ahead of queue (park.go); hurried is the set of them.
		moved    []string
		hurried  map[string]bool
		picks    uint64 // topics taken from the lanes (park.go: the backlog's share)
		parkable bool   // mirrors park (a stream per topic, to another region)
		mostOpen int    // the most mirrors ever open at once (tests check the bound)
		opened   uint64 // mirrors opened since the link began (tests count them)
		// burst counts the mirrors opened since the link's mirrors were last all parked
		// with none waiting: a catch-up when it reaches catchupOpened (mirrorEnded).
		burst int
	}
}

// LinkInfo describes a link for `quicmq links` and tests.
type LinkInfo struct {
	Region           string        `json:"region"`
	Node             string        `json:"node"`
	Addr             string        `json:"addr"`
	Connected        bool          `json:"connected"`
	Since            time.Time     `json:"since"` // when the current connection was established
	LocalAddr        string        `json:"local_addr"`
	RTT              time.Duration `json:"rtt_ns"`
	MinRTT           time.Duration `json:"min_rtt_ns"`
	CongestionWindow uint64        `json:"congestion_window"`
	BytesSent        uint64        `json:"bytes_sent"`
	BytesReceived    uint64        `json:"bytes_received"`
	PacketsLost      uint64        `json:"packets_lost"`
	Mirrors          []string      `json:"mirrors"`         // topics mirrored over this link, open or parked, by name (LinksPage: one page of them)
	MirroredTopics   int           `json:"mirrored_topics"` // how many topics are mirrored over this link
	// MirrorsNext is, when Mirrors is a page (LinksPage) with more topics after it, the last
	// topic listed: ask again with it as LinksOptions.MirrorsAfter for the next page.
	MirrorsNext    string `json:"mirrors_next,omitempty"`
	MirrorStreams  int    `json:"mirror_streams"`  // mirrors holding a stream now
	MirrorsWaiting int    `json:"mirrors_waiting"` // mirrors waiting for a stream
	MirrorsStalled int    `json:"mirrors_stalled"` // mirrors reported stalled
	Migrations     uint64 `json:"migrations"`
	Reconnects     uint64 `json:"reconnects"`
	IdleTimeouts   uint64 `json:"idle_timeouts"` // connections ended: no packet from the peer for LinkIdleTimeout
	LastError      string `json:"last_error,omitempty"`
}

func newLink(f *Federation, p Peer, counters *linkCounters) *link {
	ctx, cancel := context.WithCancel(context.Background())
	l := &link{
		f: f, peer: p, ctx: ctx, cancel: cancel, counters: counters,
		log:          f.log.With("peer", p.Name, "peer_region", p.Region),
		interestWake: make(chan struct{}, 1),
		sched:        make(chan struct{}, 1),
		redial:       make(chan struct{}, 1),
		done:         make(chan struct{}),
	}
	l.mu.mirrors = make(map[string]*mirror)
	l.mu.health = make(map[string]*mirrorHealth)
	l.mu.stalled = make(map[string]bool)
	l.mu.unwanted = make(map[string]bool)
	l.mu.queued = make(map[string]bool)
	l.mu.hurried = make(map[string]bool)
	l.mu.conns = 1 // a health's zero announcedOn never reads as announced
	return l
}

func (l *link) stop() { l.cancel() }

// ended reports whether run has returned.
func (l *link) ended() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// connected reports whether the link's connection is established and has not ended: the
// liveness watch (serve) ends one whose peer was silent for LinkIdleTimeout.
func (l *link) connected() bool {
	l.mu.Lock()
	conn := l.mu.conn
	l.mu.Unlock()
	return conn != nil && conn.Context().Err() == nil
}

// interestChanged asks the link's goroutine to apply the watched patterns now; with all, to
// look at every announced and mirrored topic again too (a Resync: whether this node mirrors
// a topic may have changed for reasons other than the patterns, Config.ShouldMirror).
func (l *link) interestChanged(all bool) {
	if all {
		l.resync.Store(true)
	}
	select {
	case l.interestWake <- struct{}{}:
	default:
	}
}

// run dials, serves and redials with back-off until ctx or the link is stopped.
func (l *link) run(parent context.Context) {
	ctx, cancel := context.WithCancel(l.ctx)
	defer cancel()
	stop := context.AfterFunc(parent, cancel)
	defer stop()
	defer func() {
		close(l.done)
		if l.failed.Load() {
			l.f.PeersChanged() // reconcile drops this link, or replaces it if the peer is back
		}
	}()

	backoff := l.f.cfg.ReconnectMin
	for attempt := 0; ctx.Err() == nil; attempt++ {
		if l.failed.Load() {
			// Gossip declares the peer failed, and the connection kept through that verdict
			// has ended: no dial to a peer gossip does not see.
			l.log.Info("link closed: its connection ended while gossip declares the peer failed")
			return
		}
		select { // a restart the peer announced before this attempt is the one it reaches
		case <-l.redial:
		default:
		}
		conn, err := l.dial(ctx)
		if err != nil {
			l.setError(err)
			if attempt%10 == 0 {
				l.log.Info("link dial failed; retrying", "addr", l.peer.Addr, "err", err, "backoff", backoff)
			}
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			case <-l.redial: // the peer is back (it dialed this node): now, not after the back-off
				backoff = l.f.cfg.ReconnectMin
				continue
			}
			backoff = min(backoff*2, l.f.cfg.ReconnectMax)
			continue
		}
		backoff = l.f.cfg.ReconnectMin
		if attempt > 0 || l.reconnects.Load() > 0 {
			l.log.Info("link reconnected", "addr", l.peer.Addr)
		} else {
			l.log.Info("link up", "addr", l.peer.Addr)
		}
		err = l.serve(ctx, conn)
		if parent.Err() != nil {
			// A deliberate end: the peer is told this node is stopping, and neither side
			// reports a lost link.
			l.closeConn(conn, wire.AppShutdown, "node stopping")
			l.log.Info("link closed: node stopping")
			return
		}
		l.closeConn(conn, wire.AppNoError, "link closing")
		switch {
		case ctx.Err() != nil:
			l.log.Info("link closed: the peer left the mesh or moved")
		case closedForPeerRestart(err):
			l.reconnects.Add(1)
			l.setError(err)
			l.log.Info("link to the peer's previous process closed; redialing its new one")
		case supersededByPeer(err):
			// The peer closes only connections it holds a newer one for, and this link holds
			// one at a time: another node presents this node's name. Back off rather than
			// take turns with it at handshake speed.
			l.reconnects.Add(1)
			l.setError(err)
			l.log.Warn("link connection superseded at the peer by a newer one that is not this link's (another node with this node's name?); redialing after a back-off",
				"backoff", l.f.cfg.ReconnectMax)
			select {
			case <-ctx.Done():
			case <-time.After(l.f.cfg.ReconnectMax):
			}
		case peerStopping(err):
			l.reconnects.Add(1)
			l.setError(err)
			l.log.Info("link closed: peer stopping; redialing until it returns or leaves the mesh")
		default:
			l.reconnects.Add(1)
			l.setError(err)
			l.log.Warn("link lost; reconnecting and resuming every mirror from its cursor", "err", err)
		}
	}
}

func (l *link) setError(err error) {
	if err == nil {
		return
	}
	l.mu.Lock()
	l.mu.lastErr = err.Error()
	l.mu.Unlock()
}

// newTransport opens a socket for a connection whose packets probe sees.
func (l *link) newTransport(probe *liveness.Probe) (*quic.Transport, error) {
	pc, err := l.f.cfg.ListenPacket(&net.UDPAddr{IP: net.ParseIP(l.f.cfg.BindHost)})
	if err != nil {
		return nil, err
	}
	return &quic.Transport{Conn: probe.Wrap(pc)}, nil
}

func (l *link) dial(ctx context.Context) (*quic.Conn, error) {
	probe := liveness.NewProbe(nil)
	tr, err := l.newTransport(probe)
	if err != nil {
		return nil, fmt.Errorf("bind: %w", err)
	}
	addr, err := net.ResolveUDPAddr("udp", l.peer.Addr)
	if err != nil {
		closeTransport(tr)
		return nil, err
	}
	tlsConf := l.f.cfg.TLS.Clone()
	tlsConf.NextProtos = []string{wire.PeerALPN}
	tlsConf.ServerName = l.peer.Name
	tlsConf.MinVersion = tls.VersionTLS13
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l.mu.Lock()
	l.mu.cancelDial = cancel
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.mu.cancelDial = nil
		l.mu.Unlock()
	}()
	conn, err := tr.Dial(dctx, addr, tlsConf, &quic.Config{
		KeepAlivePeriod:            l.f.cfg.LinkKeepAlive,
		MaxIdleTimeout:             liveness.IdleTimeoutFor(l.f.cfg.LinkIdleTimeout), // the watch below decides first
		MaxIncomingStreams:         -1,
		MaxIncomingUniStreams:      -1,
		InitialStreamReceiveWindow: 512 << 10,
		MaxStreamReceiveWindow:     2 << 20,
		// 128 mirror streams at their first window: quic-go widens a connection's window only
		// when it is used up within a few round trips, which stalled streams never do, so a
		// smaller first window would let a few stalled mirrors starve the link's others.
		InitialConnectionReceiveWindow: 64 << 20,
		MaxConnectionReceiveWindow:     256 << 20, // 100 stalled mirror streams at their full window
		// A qlog file per connection when QLOGDIR is set.
		Tracer: qlog.DefaultConnectionTracer,
	})
	if err != nil {
		closeTransport(tr)
		return nil, err
	}
	l.counters.opened(conn, time.Now(), l.f.cfg.LinkIdleTimeout)
	l.mu.Lock()
	l.mu.conn = conn
	l.mu.transports = []*quic.Transport{tr}
	l.mu.probe = probe
	l.mu.local = tr.Conn.LocalAddr().String()
	l.mu.since = l.f.cfg.Now()
	l.mu.Unlock()
	return conn, nil
}

// closeConn closes conn with code (a no-op if it has ended already) and drops what was
// kept for it; its final figures go to the peer's counters.
func (l *link) closeConn(conn *quic.Conn, code quic.ApplicationErrorCode, reason string) {
	conn.CloseWithError(code, reason)
	l.counters.ended(conn, time.Now())
	l.mu.Lock()
	trs := l.mu.transports
	l.mu.conn, l.mu.transports, l.mu.local, l.mu.opener, l.mu.probe = nil, nil, "", nil, nil
	l.mu.Unlock()
	for _, tr := range trs {
		closeTransport(tr)
	}
}

// serve runs the catalog stream and the mirrors over one connection until it ends.
func (l *link) serve(ctx context.Context, conn *quic.Conn) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(conn.Context(), cancel)
	defer stop()

	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()                   // mirrors stop before wg.Wait returns
	l.f.startRaft(ctx, l, conn, &wg) // raft streams to a node of this region (raft.go)
	l.mu.Lock()
	probe := l.mu.probe
	l.mu.Unlock()
	wg.Add(1)
	go func() { // ends conn when the peer is silent for LinkIdleTimeout; probes for its restart
		defer wg.Done()
		if liveness.Watch(ctx, conn, probe, liveness.Config{
			Timeout: l.f.cfg.LinkIdleTimeout, KeepAlive: l.f.cfg.LinkKeepAlive,
			Code: wire.AppNoError, Reason: fmt.Sprintf("no packet from the peer for %v (idle timeout)", l.f.cfg.LinkIdleTimeout),
		}) {
			l.silent.Add(1)
		}
	}()

	str, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return err
	}
	defer str.CancelRead(wire.AppCancelled)
	w := wire.NewWriter(str)
	// A node of this region announces every topic it holds (single-copy placement needs
	// them all; a replicated region's raft needs none) and is never mirrored from: its
	// records reach this node's clients by relay.
	local := l.peer.Region == l.f.cfg.Region
	patterns := []string{">"}
	switch {
	case !local:
		patterns = l.f.patterns()
	case l.f.cfg.NoLocalCatalog:
		patterns = nil // a replicated region: raft places its topics (Config.NoLocalCatalog)
	}
	var opener mirrorOpener
	if !local {
		opener = l.f.mapping.connect(ctx, conn, &wg)
		l.mu.Lock()
		l.mu.opener = opener
		l.mu.Unlock()
	}
	l.resetForConn(patterns, !local && !l.f.cfg.AblationSharedLink)
	// The incarnation tells the peer whether this is a reconnect or a restarted node
	// (peerHello on its side).
	watch := patterns
	if !local {
		watch = l.f.watchPatterns(patterns)
	}
	w.Write(&wire.Watch{Patterns: watch, Incarnation: l.f.cfg.Incarnation})
	if err := w.Flush(); err != nil {
		return err
	}

	// The catalog reader notes announced topics and reported heads (park.go); this
	// goroutine opens and parks the mirrors.
	catalogErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		catalogErr <- l.readCatalog(str, local)
	}()
	parkTick := time.NewTicker(l.f.cfg.parkTick())
	defer parkTick.Stop()
	var lastPark time.Time
	for {
		if !local {
			l.schedule(ctx, conn, opener, &wg)
		}
		select {
		case <-ctx.Done():
			return context.Cause(conn.Context())
		case err := <-catalogErr:
			return fmt.Errorf("catalog stream: %w", err)
		case <-l.sched:
			// Topics wait with no stream free: park for them now rather than at the next
			// tick (at most every parkTick/10, as parkIdle looks at every open mirror).
			if now := time.Now(); l.waitingForStream() && now.Sub(lastPark) >= l.f.cfg.parkTick()/10 {
				lastPark = now
				l.parkIdle()
			}
		case <-parkTick.C:
			lastPark = time.Now()
			l.parkIdle()
		case <-l.interestWake:
			if local {
				continue
			}
			patterns = l.f.patterns()
			// A WATCH only when what is watched changed: the peer lists every topic again on
			// each WATCH, and Resync (every gossip event, every placement change) asks only
			// that the mirrors be compared with what is wanted now (repattern). Before, each
			// gossip event around a cut cost the origin a listing of its 100,000 topics.
			if next := l.f.watchPatterns(patterns); !slices.Equal(next, watch) {
				watch = next
				w.Write(&wire.Watch{Patterns: watch})
				if err := w.Flush(); err != nil {
					return err
				}
			}
			l.repattern(patterns, l.resync.Swap(false))
		}
	}
}

// readCatalog reads the peer's TOPIC announcements, the SUBSCRIBED that follows the topics
// it held when the stream began, and the heads it reports.
func (l *link) readCatalog(str *quic.Stream, local bool) error {
	r := wire.NewReader(str, wire.Limits{})
	// announcing is the topic of the TOPIC frame just read, whose mirror waits for the HEAD
	// that may follow: announced with it, the topic is queued for a stream only if that head
	// needs one (a topic that is caught up, or whose copy at the peer holds only records
	// mirrored from here, takes no place among the waiting), and never opened in between
	// with its head unknown. Any other frame announces it without a head.
	announcing := ""
	flush := func() {
		if announcing != "" && !local {
			l.announce(announcing, nil)
		}
		announcing = ""
	}
	// An announced head whose last record the origin appended after the links to it came
	// back (by its clock: a skew only moves a few topics between the lanes) also moved
	// since: a record published after the return, which the listing's head carries.
	upSince := l.counters.since().UnixNano()
	for {
		f, err := r.Read()
		if err != nil {
			return err
		}
		switch f := f.(type) {
		case *wire.Topic:
			flush()
			if cb := l.f.cfg.OnCatalog; cb != nil {
				cb(l.peer, f.Name)
			}
			announcing = f.Name
			continue
		case *wire.Subscribed:
			flush()
			if cb := l.f.cfg.OnCatalogSynced; cb != nil {
				cb(l.peer)
			}
		case *wire.Head:
			// The head of an announced topic: what reopens a parked mirror, and tells an
			// open one it is behind while its own stream carries nothing. One right after
			// its topic's TOPIC is the announcement's (the head when the peer listed it);
			// any other reports a move on this connection: a live topic (park.go), as is
			// one announced with a head appended since upSince. Its position is the
			// origin's own head (Config.OwnHeads; next from a peer that does not send it).
			if f.Topic == "" || local {
				flush()
				break
			}
			hd := &catalogHead{next: f.Next, own: min(f.Position, f.Next), time: f.Time, moved: f.Topic != announcing || f.Time >= upSince}
			if f.Topic == announcing {
				announcing = ""
				l.announce(f.Topic, hd)
				break
			}
			flush()
			l.headReported(f.Topic, hd)
		case *wire.ErrorFrame:
			return f.AsError()
		default:
			return fmt.Errorf("unexpected %s on the catalog stream", f.Type())
		}
		announcing = ""
	}
}

// migrate moves the connection to a new UDP socket: AddPath, Probe, Switch. The old socket
// stays open for the connection's life (closing it would kill the connection). If migration
// fails, the connection is closed so the link reconnects and resumes from its cursors.
func (l *link) migrate(ctx context.Context) error {
	l.mu.Lock()
	conn, probe := l.mu.conn, l.mu.probe
	l.mu.Unlock()
	if conn == nil {
		return errors.New("not connected")
	}
	tr, err := l.newTransport(probe)
	if err != nil {
		return err
	}
	fail := func(step string, err error) error {
		closeTransport(tr)
		l.log.Warn("migration failed; reconnecting", "step", step, "err", err)
		conn.CloseWithError(appMigrationFailed, "migration failed")
		return fmt.Errorf("migration %s: %w (reconnecting instead)", step, err)
	}
	path, err := conn.AddPath(tr)
	if err != nil {
		return fail("add path", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := path.Probe(pctx); err != nil {
		path.Close()
		return fail("probe", err)
	}
	if err := path.Switch(); err != nil {
		path.Close()
		return fail("switch", err)
	}
	l.mu.Lock()
	local := tr.Conn.LocalAddr().String()
	if l.mu.conn == conn {
		l.mu.transports = append(l.mu.transports, tr)
		l.mu.local = local
		tr = nil
	}
	l.mu.Unlock()
	if tr != nil { // the connection ended meanwhile
		closeTransport(tr)
		return errors.New("connection ended during migration")
	}
	l.migrations.Add(1)
	l.log.Info("link migrated", "local", local)
	return nil
}

func (l *link) info() LinkInfo { return l.infoPage(LinksOptions{MaxMirrors: math.MaxInt}) }

// infoWith is info, with the list of mirrored topics only when withMirrors (a scrape needs
// only the counts).
func (l *link) infoWith(withMirrors bool) LinkInfo {
	if withMirrors {
		return l.info()
	}
	return l.infoPage(LinksOptions{MaxMirrors: -1})
}

// infoPage is info with one page of the mirrored topics (LinksOptions).
func (l *link) infoPage(o LinksOptions) LinkInfo {
	l.mu.Lock()
	conn := l.mu.conn
	li := LinkInfo{
		Region: l.peer.Region, Node: l.peer.Name, Addr: l.peer.Addr,
		Connected: conn != nil, Since: l.mu.since, LastError: l.mu.lastErr, LocalAddr: l.mu.local,
		Migrations: l.migrations.Load(), Reconnects: l.reconnects.Load(), IdleTimeouts: l.silent.Load(),
	}
	var names []string
	if o.MaxMirrors >= 0 {
		names = make([]string, 0, min(len(l.mu.health), 1024))
		for t := range l.mu.health {
			if t > o.MirrorsAfter {
				names = append(names, t)
			}
		}
	}
	li.MirroredTopics = len(l.mu.health)
	li.MirrorStreams, li.MirrorsWaiting, li.MirrorsStalled = len(l.mu.mirrors), len(l.mu.queued), len(l.mu.stalled)
	l.mu.Unlock()
	if names != nil {
		slices.Sort(names)
		if len(names) > o.MaxMirrors {
			names = names[:o.MaxMirrors]
			if o.MaxMirrors > 0 {
				li.MirrorsNext = names[len(names)-1]
			}
		}
		li.Mirrors = slices.Clip(names)
	}
	if conn != nil {
		st := conn.ConnectionStats()
		li.RTT, li.MinRTT = st.SmoothedRTT, st.MinRTT
		li.CongestionWindow = uint64(st.CongestionWindow)
		li.BytesSent, li.BytesReceived = st.BytesSent, st.BytesReceived
		li.PacketsLost = st.PacketsLost
	}
	return li
}

// closeTransport closes a transport and its socket: quic-go leaves a socket it was given
// open.
func closeTransport(tr *quic.Transport) {
	tr.Close()
	tr.Conn.Close()
}

// connectionEnded reports whether err is the end of the whole connection (closed by either
// side, an idle timeout, a stateless reset), which the link reports, rather than of one
// stream.
func connectionEnded(err error) bool {
	var (
		ae *quic.ApplicationError
		te *quic.TransportError
		ie *quic.IdleTimeoutError
		sr *quic.StatelessResetError
	)
	return errors.As(err, &ae) || errors.As(err, &te) || errors.As(err, &ie) || errors.As(err, &sr) ||
		errors.Is(err, quic.ErrTransportClosed)
}

// peerStopping reports whether err says the peer is shutting down deliberately: it closed
// the connection with wire.AppShutdown, or ended a stream with ERROR shutting-down.
func peerStopping(err error) bool {
	var ae *quic.ApplicationError
	if errors.As(err, &ae) && ae.Remote && ae.ErrorCode == wire.AppShutdown {
		return true
	}
	var we *wire.Error
	return errors.As(err, &we) && we.Code == wire.CodeShuttingDown
}
