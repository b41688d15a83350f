package federation

import (
	"context"
	cryptorand "crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/certs"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/wal"
)

// The harness runs one node per region in this process: a real wal.Log on disk in
// t.TempDir(), a real QUIC listener on 127.0.0.1 port 0 (mutual TLS from one test CA) whose
// accepted streams go to ServeStream exactly as node's sessions hand them over, and a
// Federation whose Peers are the other regions' listeners. Fault controls: cut a link's
// connection (export_test.go), drop the packets a listener receives (packetFilter), stop and
// restart a node's Federation or the whole node on its data directory and address. The same
// mesh also runs raft nodes, several per region with raft IDs (addRaft, raft_test.go).

func testLogger(t testing.TB) *slog.Logger { return testlog.New(t) }

// fedMesh is a set of regions with one node each (and raft nodes), sharing a test CA.
type fedMesh struct {
	t    *testing.T
	ca   *certs.CA
	pool *x509.CertPool

	mu    sync.Mutex
	nodes map[string]*fedNode // by region
	raft  []*raftNode         // the raft nodes (raft_test.go), several per region, in start order
}

// nodeOpts adjusts one node.
type nodeOpts struct {
	mirror     []string
	localAddrs func() ([]net.Addr, error) // nil: the address watch is off
	walFS      func() wal.Options         // nil: the disk, no retention loop
	sharedLink bool                       // Config.AblationSharedLink (ablation_test.go)
	stallAfter time.Duration              // Config.StallAfter (0: the default, 30 s)
	maxStreams int                        // Config.MaxMirrorStreams (0: the default)
	parkAfter  time.Duration              // Config.MirrorParkAfter (0: the default)
	slice      time.Duration              // Config.MirrorSlice (0: the default)
	ownHeads   bool                       // Config.OwnHeads: every peer region reads own heads
	ownAsked   *atomic.Int64              // counts the calls of Config.OwnHeads (nil: not counted)
	// shouldMirror is Config.ShouldMirror (nil: none, every wanted topic is mirrored here).
	shouldMirror func(topic string) bool
	catchupEnded func() // Config.CatchupEnded
}

func newFedMesh(t *testing.T) *fedMesh {
	t.Helper()
	ca, _, err := certs.EnsureCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	m := &fedMesh{t: t, ca: ca, pool: pool, nodes: map[string]*fedNode{}}
	// Registered first, so it runs last: after every node's cleanup.
	t.Cleanup(func() { checkNoLinkGoroutines(t) })
	return m
}

// peers is every other region's listening node: the Peers of a Federation.
func (m *fedMesh) peers() []Peer {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Peer
	for _, n := range m.nodes {
		a := n.addr.Load()
		if a == nil {
			a = n.listed.Load()
		}
		if a != nil {
			out = append(out, Peer{Region: n.region, Name: n.name, Addr: *a, Failed: n.failed.Load()})
		}
	}
	return out
}

// fedNode is one region's node: log, listener and federation.
type fedNode struct {
	m            *fedMesh
	region, name string
	dir          string
	opts         nodeOpts
	cert         tls.Certificate
	resetKey     quic.StatelessResetKey     // the listener's, kept across restarts as node keeps it on disk
	ks           atomic.Pointer[killSwitch] // this start's: kill cuts every socket of the node at once

	log    *wal.Log
	filter *packetFilter // the listener's socket
	tr     *quic.Transport
	ln     *quic.Listener
	addr   atomic.Pointer[string] // nil while not listening
	listed atomic.Pointer[string] // the address Peers gives while not listening (nil: none), as gossip lists a crashed node
	failed atomic.Bool            // Peers marks the node failed, as gossip's verdict does (Peer.Failed)
	listen string                 // the address to listen on again after a restart

	serveCtx    context.Context
	serveCancel context.CancelFunc
	serveWG     sync.WaitGroup
	connsMu     sync.Mutex
	conns       map[*quic.Conn]struct{}

	logs *logRecorder // every record the node's federations logged

	fedMu  sync.Mutex
	fed    *Federation
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan struct{}
}

// addNode starts region's node: it listens, and its federation links to every other node.
func (m *fedMesh) addNode(region string, opts nodeOpts) *fedNode {
	m.t.Helper()
	name := "node-" + region
	cert, err := m.ca.Issue(name, []string{name, "127.0.0.1"})
	if err != nil {
		m.t.Fatal(err)
	}
	n := &fedNode{m: m, region: region, name: name, dir: m.t.TempDir(), opts: opts, cert: cert, listen: "127.0.0.1:0", logs: &logRecorder{}}
	cryptorand.Read(n.resetKey[:])
	n.ks.Store(new(killSwitch))
	m.mu.Lock()
	m.nodes[region] = n
	m.mu.Unlock()
	n.openLog()
	n.startListener()
	n.startFed()
	m.t.Cleanup(n.stop)
	for _, o := range m.all() {
		if f := o.fedNow(); o != n && f != nil {
			f.PeersChanged()
		}
	}
	return n
}

func (m *fedMesh) all() []*fedNode {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*fedNode, 0, len(m.nodes))
	for _, n := range m.nodes {
		out = append(out, n)
	}
	return out
}

func (n *fedNode) openLog() {
	t := n.m.t
	t.Helper()
	var o wal.Options
	if n.opts.walFS != nil {
		o = n.opts.walFS()
	}
	o.Logger = testLogger(t)
	if o.RetentionInterval == 0 {
		o.RetentionInterval = -1 // tests enforce retention themselves
	}
	l, err := wal.Open(n.dir, o)
	if err != nil {
		t.Fatal(err)
	}
	n.log = l
}

func (n *fedNode) startListener() {
	n.bindListener()
	n.serveWG.Add(1)
	go n.acceptLoop(n.ln)
}

// bindListener listens without accepting yet (quic-go queues the handshakes), as node.New
// does before Run.
func (n *fedNode) bindListener() {
	t := n.m.t
	t.Helper()
	addr, err := net.ResolveUDPAddr("udp", n.listen)
	if err != nil {
		t.Fatal(err)
	}
	var udp *net.UDPConn
	for i := 0; ; i++ { // a restart rebinds the same port, which the kernel may hold briefly
		udp, err = net.ListenUDP("udp", addr)
		if err == nil || i == 50 {
			break
		}
		testlog.Pause(context.Background(), 20*time.Millisecond) // a retry's back-off
	}
	if err != nil {
		t.Fatal(err)
	}
	n.listen = udp.LocalAddr().String()
	n.filter = &packetFilter{conn: udp, ks: n.ks.Load()}
	n.tr = &quic.Transport{Conn: n.filter, StatelessResetKey: &n.resetKey}
	n.ln, err = n.tr.Listen(&tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{n.cert},
		NextProtos:   []string{wire.PeerALPN},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    n.m.pool,
	}, &quic.Config{
		MaxIncomingStreams:    4096,
		MaxIncomingUniStreams: -1,
		KeepAlivePeriod:       5 * time.Second,
		MaxIdleTimeout:        30 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	n.serveCtx, n.serveCancel = context.WithCancel(context.Background())
	n.conns = make(map[*quic.Conn]struct{})
	a := n.listen
	n.addr.Store(&a)
}

func (n *fedNode) acceptLoop(ln *quic.Listener) {
	defer n.serveWG.Done()
	for {
		conn, err := ln.Accept(n.serveCtx)
		if err != nil {
			return
		}
		n.connsMu.Lock()
		n.conns[conn] = struct{}{}
		n.connsMu.Unlock()
		n.serveWG.Add(1)
		go func() {
			defer n.serveWG.Done()
			n.serveConn(conn)
			n.connsMu.Lock()
			delete(n.conns, conn)
			n.connsMu.Unlock()
		}()
	}
}

// serveConn does what node's session does for a peer: read each stream's first frame and
// hand the stream to ServeStream.
func (n *fedNode) serveConn(conn *quic.Conn) { servePeerStreams(conn, n.fedNow) }

// servePeerStreams is node's session for a peer connection, for the tests' harnesses: each
// stream's first frame is read and the stream handed to the federation fedNow returns.
func servePeerStreams(conn *quic.Conn, fedNow func() *Federation) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		str, err := conn.AcceptStream(conn.Context())
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := wire.NewReader(str, wire.Limits{})
			f, err := r.Read()
			if err != nil || !IsPeerFrame(f) {
				str.CancelRead(wire.AppProtocol)
				str.CancelWrite(wire.AppProtocol)
				return
			}
			fed := fedNow()
			if fed == nil {
				// Stopped: refuse as a node shutting down does (its draining session), not
				// as a protocol error, which the peer would rightly report as a WARN.
				str.CancelRead(wire.AppCancelled)
				w := wire.NewWriter(str)
				w.Write(&wire.ErrorFrame{Code: wire.CodeShuttingDown, Message: "node shutting down"})
				w.Flush()
				str.Close()
				return
			}
			fed.ServeStream(conn.Context(), conn, str, r, f)
		}()
	}
}

// stopListener closes the listener and every accepted connection (with CONNECTION_CLOSE, as
// a node shutting down does), and waits for their streams.
func (n *fedNode) stopListener() {
	if n.ln == nil {
		return
	}
	n.serveCancel()
	n.ln.Close()
	n.connsMu.Lock()
	for c := range n.conns {
		c.CloseWithError(wire.AppShutdown, "node stopping")
	}
	n.connsMu.Unlock()
	n.serveWG.Wait()
	// Unlisted last, as a node leaves gossip only after it closed its sessions: a peer
	// that dropped the node from its list first would end its link as "left the mesh"
	// before reading the CONNECTION_CLOSE that says "stopping".
	n.addr.Store(nil)
	n.tr.Close()
	n.filter.Close() // a Transport given a socket does not close it
	n.ln = nil
}

// startFed starts a new Federation on the node's log, with a new metrics registry.
func (n *fedNode) startFed() {
	t := n.m.t
	t.Helper()
	reg := prometheus.NewRegistry()
	f, err := New(Config{
		Region: n.region, Name: n.name,
		Log: n.log,
		TLS: &tls.Config{Certificates: []tls.Certificate{n.cert}, RootCAs: n.m.pool},
		Peers: func() []Peer {
			var out []Peer
			for _, p := range n.m.peers() {
				if p.Region != n.region {
					out = append(out, p)
				}
			}
			return out
		},
		Mirror:     n.opts.mirror,
		LocalAddrs: n.opts.localAddrs,
		ListenPacket: func(addr *net.UDPAddr) (net.PacketConn, error) {
			udp, err := net.ListenUDP("udp", addr)
			if err != nil {
				return nil, err
			}
			return &killableConn{PacketConn: udp, ks: n.ks.Load()}, nil
		},
		AddrWatchInterval:  addrWatch(n.opts.localAddrs),
		BindHost:           "127.0.0.1",
		ReconnectMin:       20 * time.Millisecond,
		ReconnectMax:       200 * time.Millisecond,
		ReconcileInterval:  100 * time.Millisecond,
		StallAfter:         n.opts.stallAfter,
		MaxMirrorStreams:   n.opts.maxStreams,
		MirrorParkAfter:    n.opts.parkAfter,
		MirrorSlice:        n.opts.slice,
		HeadReportInterval: 20 * time.Millisecond,
		OwnHeads: func(string) bool {
			if n.opts.ownAsked != nil {
				n.opts.ownAsked.Add(1)
			}
			return n.opts.ownHeads
		},
		ShouldMirror: n.opts.shouldMirror,
		CatchupEnded: n.opts.catchupEnded,
		Logger:       slog.New(n.logs.handler(testLogger(t).Handler())).With("node", n.name),
		Registerer:   reg,

		AblationSharedLink: n.opts.sharedLink,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.Run(ctx)
	}()
	n.fedMu.Lock()
	n.fed, n.reg, n.cancel, n.done = f, reg, cancel, done
	n.fedMu.Unlock()
}

func (n *fedNode) fedNow() *Federation {
	n.fedMu.Lock()
	defer n.fedMu.Unlock()
	return n.fed
}

func (n *fedNode) registry() *prometheus.Registry {
	n.fedMu.Lock()
	defer n.fedMu.Unlock()
	return n.reg
}

// stopFed stops the Federation (every link and mirror) and waits for Run to return.
func (n *fedNode) stopFed() {
	n.fedMu.Lock()
	cancel, done := n.cancel, n.done
	n.cancel, n.done = nil, nil
	n.fed = nil // streams arriving from now on are refused, as a stopped node's would be
	n.fedMu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		n.m.t.Errorf("%s: federation Run did not return within 20 s", n.name)
	}
}

// stop stops everything; restart opens the log again from its directory and listens on the
// same address.
func (n *fedNode) stop() {
	n.stopFed()
	n.stopListener()
	if n.log != nil {
		if err := n.log.Close(); err != nil {
			n.m.t.Errorf("%s: close log: %v", n.name, err)
		}
		n.log = nil
	}
}

// kill stops the node as SIGKILL would, as far as its peers can tell: from this moment no
// packet of it leaves or is read (no CONNECTION_CLOSE, no stateless reset), then its pieces
// are stopped behind that wall. Its synced log stays, as on a real disk.
func (n *fedNode) kill() {
	n.ks.Load().dead.Store(true)
	if a := n.addr.Load(); a != nil {
		n.listed.Store(a) // gossip lists a killed node until it notices
	}
	n.stop()
}

// restart returns when the node is back: log open, listening (at the returned time) and its
// federation started.
func (n *fedNode) restart() (listening time.Time) {
	n.m.t.Helper()
	n.ks.Store(new(killSwitch))
	n.openLog()
	n.bindListener()
	listening = time.Now()
	n.startFed()
	n.serveWG.Add(1)
	go n.acceptLoop(n.ln)
	for _, o := range n.m.all() {
		if f := o.fedNow(); o != n && f != nil {
			f.PeersChanged()
		}
	}
	return listening
}

// cursor is n's stored mirror cursor of topic from region: the last origin offset mirrored,
// -1 for none.
func (n *fedNode) cursor(t testing.TB, region, topic string) int64 {
	t.Helper()
	pos, ok, err := n.log.Position(cursorName(region), topic)
	if err != nil {
		t.Fatalf("%s: cursor of %s from %s: %v", n.name, topic, region, err)
	}
	if !ok {
		return -1
	}
	return int64(pos)
}

// link returns this node's link to region.
func (n *fedNode) link(region string) (LinkInfo, bool) {
	for _, li := range n.fedNow().Links() {
		if li.Region == region {
			return li, true
		}
	}
	return LinkInfo{}, false
}

// packetFilter is the listener's UDP socket with a switch that drops received packets: a
// partition (drop all) or a path the peer cannot use (drop all but one source port). It is
// not a *net.UDPConn, so quic-go reads it through ReadFrom only.
type packetFilter struct {
	conn      *net.UDPConn
	ks        *killSwitch
	mode      atomic.Int32 // filterPass, filterDropAll, filterOnlyPort
	onlyPort  atomic.Int32
	dropped   atomic.Uint64
	delivered atomic.Uint64
}

const (
	filterPass = iota
	filterDropAll
	filterOnlyPort
)

func (c *packetFilter) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		n, addr, err := c.conn.ReadFrom(b)
		if err != nil {
			return n, addr, err
		}
		if c.ks.dead.Load() {
			continue
		}
		switch c.mode.Load() {
		case filterDropAll:
			c.dropped.Add(1)
			continue
		case filterOnlyPort:
			if ua, ok := addr.(*net.UDPAddr); !ok || int32(ua.Port) != c.onlyPort.Load() {
				c.dropped.Add(1)
				continue
			}
		}
		c.delivered.Add(1)
		return n, addr, nil
	}
}

func (c *packetFilter) WriteTo(b []byte, addr net.Addr) (int, error) {
	if c.ks.dead.Load() {
		return len(b), nil
	}
	return c.conn.WriteTo(b, addr)
}
func (c *packetFilter) Close() error                       { return c.conn.Close() }
func (c *packetFilter) LocalAddr() net.Addr                { return c.conn.LocalAddr() }
func (c *packetFilter) SetDeadline(t time.Time) error      { return c.conn.SetDeadline(t) }
func (c *packetFilter) SetReadDeadline(t time.Time) error  { return c.conn.SetReadDeadline(t) }
func (c *packetFilter) SetWriteDeadline(t time.Time) error { return c.conn.SetWriteDeadline(t) }

// killSwitch is one start of a node: once dead, its sockets send and read nothing.
type killSwitch struct{ dead atomic.Bool }

// killableConn is a link's socket under the node's kill switch.
type killableConn struct {
	net.PacketConn
	ks *killSwitch
}

func (c *killableConn) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		n, addr, err := c.PacketConn.ReadFrom(b)
		if err != nil || !c.ks.dead.Load() {
			return n, addr, err
		}
	}
}

func (c *killableConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	if c.ks.dead.Load() {
		return len(b), nil
	}
	return c.PacketConn.WriteTo(b, addr)
}

// publish appends records with the given payloads to topic, in one synced commit, as a
// publish in the node's region would.
func (n *fedNode) publish(t testing.TB, topic string, payloads ...string) {
	t.Helper()
	recs := make([]wal.Record, len(payloads))
	for i, p := range payloads {
		recs[i] = wal.Record{Payload: []byte(p)}
	}
	if res := n.log.Append(context.Background(), wal.AppendRequest{Topic: topic, Records: recs}); res.Err != nil {
		t.Fatalf("%s: publish to %s: %v", n.name, topic, res.Err)
	}
}

// publishSeq publishes payloads "<region>-<i>" for i in [from, to).
func (n *fedNode) publishSeq(t testing.TB, topic string, from, to int) {
	t.Helper()
	var ps []string
	for i := from; i < to; i++ {
		ps = append(ps, fmt.Sprintf("%s-%d", n.region, i))
		if len(ps) == 512 {
			n.publish(t, topic, ps...)
			ps = ps[:0]
		}
	}
	if len(ps) > 0 {
		n.publish(t, topic, ps...)
	}
}

// next is the high-watermark of topic in the node's log (0 for an unknown topic).
func (n *fedNode) next(topic string) uint64 {
	_, next, _ := n.log.Bounds(topic)
	return next
}

// fence publishes one record of topic at origin and waits until dst has mirrored it. A
// topic's mirror stream is in order and its cursor is stored with each batch, so once dst's
// cursor covers the fence, every record the stream carried before it is in dst's log: a check
// made then sees what a late batch (one resent from a stale cursor) would have added, without
// sleeping in the hope that it has arrived. Call it once the disruption is over.
func fence(t testing.TB, dst, origin *fedNode, topic string) {
	t.Helper()
	off := origin.next(topic)
	origin.publish(t, topic, fmt.Sprintf("fence-%d", off))
	testlog.WaitFor(t, 20*time.Second, fmt.Sprintf("%s to mirror the fence, %s's offset %d of %s", dst.region, origin.region, off, topic),
		func() bool { return dst.cursor(t, origin.region, topic) >= int64(off) })
}

// readAll returns every retained record of topic.
func readAll(t testing.TB, l *wal.Log, topic string) []wal.Record {
	t.Helper()
	first, next, ok := l.Bounds(topic)
	if !ok {
		return nil
	}
	var out []wal.Record
	for from := first; from < next; {
		recs, err := l.Read(topic, from, 4096, 0)
		if err != nil {
			t.Fatalf("read %s at %d: %v", topic, from, err)
		}
		if len(recs) == 0 {
			break
		}
		out = append(out, recs...)
		from = recs[len(recs)-1].Offset + 1
	}
	return out
}

// checkMirrored checks that dst's log of topic holds origin's own records of topic (those
// published in origin's region) exactly once each, in origin order, each with OriginRegion
// and OriginOffset naming its place in origin's log, and nothing that originated in dst
// itself under another region's name. dst may be behind: it must hold a prefix. It returns
// how many records of origin dst holds.
func checkMirrored(t testing.TB, dst, origin *fedNode, topic string) int {
	t.Helper()
	var want []wal.Record
	for _, r := range readAll(t, origin.log, topic) {
		if r.OriginRegion == "" {
			want = append(want, r)
		}
	}
	var got []wal.Record
	for _, r := range readAll(t, dst.log, topic) {
		switch r.OriginRegion {
		case origin.region:
			got = append(got, r)
		case dst.region:
			t.Fatalf("%s's log of %s: record at offset %d names its own region as origin (a loop)", dst.region, topic, r.Offset)
		}
	}
	if err := comparePrefix(got, want); err != nil {
		t.Fatalf("%s's log of %s, records from %s (%d held, %d at the origin): %v",
			dst.region, topic, origin.region, len(got), len(want), err)
	}
	return len(got)
}

// comparePrefix reports the first difference between got and a prefix of want, naming
// duplicates and gaps.
func comparePrefix(got, want []wal.Record) error {
	seen := make(map[uint64]uint64, len(got)) // origin offset -> local offset
	var dups []string
	for _, r := range got {
		if prev, ok := seen[r.OriginOffset]; ok && len(dups) < 5 {
			dups = append(dups, fmt.Sprintf("origin offset %d at local offsets %d and %d", r.OriginOffset, prev, r.Offset))
		}
		seen[r.OriginOffset] = r.Offset
	}
	if len(dups) > 0 {
		return fmt.Errorf("%d records but only %d distinct origin offsets: DUPLICATES, e.g. %s",
			len(got), len(seen), strings.Join(dups, "; "))
	}
	if len(got) > len(want) {
		return fmt.Errorf("more records than the origin has")
	}
	for i := range got {
		g, w := &got[i], &want[i]
		if g.OriginOffset != w.Offset || string(g.Payload) != string(w.Payload) {
			return fmt.Errorf("record %d (local offset %d): origin offset %d payload %q, want origin offset %d payload %q (a gap or a reorder)",
				i, g.Offset, g.OriginOffset, g.Payload, w.Offset, w.Payload)
		}
	}
	return nil
}

// metricValue sums the samples of a metric family whose labels include want.
func metricValue(t testing.TB, reg prometheus.Gatherer, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue metric
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// linkCodeRE matches the functions of this package's non-test files in a goroutine stack.
var linkCodeRE = regexp.MustCompile(`quicmq/federation/(federation|link|mirror|serve)\.go`)

// checkNoLinkGoroutines fails if a goroutine still runs federation code after every node
// stopped (a goleak equivalent without the dependency).
func checkNoLinkGoroutines(t testing.TB) {
	t.Helper()
	testlog.WaitForErr(t, 5*time.Second, "every goroutine running federation code to end after stop", func() error {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if linkCodeRE.MatchString(g) {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return nil
		}
		return fmt.Errorf("%d still run; first:\n%s", len(leaked), leaked[0])
	})
}

// addrWatch is the address-watch interval for a node: fast when the test gives addresses.
func addrWatch(f func() ([]net.Addr, error)) time.Duration {
	if f == nil {
		return -1
	}
	return 20 * time.Millisecond
}

// logRecorder keeps the records of the loggers made with handler, besides passing them on.
type logRecorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *logRecorder) handler(next slog.Handler) slog.Handler {
	return &recordingHandler{r: r, next: next}
}

// find returns the records at level or above whose message contains msg ("" for any).
func (r *logRecorder) find(level slog.Level, msg string) []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []slog.Record
	for _, rec := range r.records {
		if rec.Level >= level && strings.Contains(rec.Message, msg) {
			out = append(out, rec)
		}
	}
	return out
}

// fmtRecords renders records for a failure message.
func fmtRecords(recs []slog.Record) string {
	var b strings.Builder
	for _, rec := range recs {
		fmt.Fprintf(&b, "\n  %s %s", rec.Level, rec.Message)
		rec.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s", a); return true })
	}
	return b.String()
}

type recordingHandler struct {
	r     *logRecorder
	attrs []slog.Attr
	next  slog.Handler
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *recordingHandler) Handle(ctx context.Context, rec slog.Record) error {
	c := rec.Clone()
	c.AddAttrs(h.attrs...)
	h.r.mu.Lock()
	h.r.records = append(h.r.records, c)
	h.r.mu.Unlock()
	if h.next.Enabled(ctx, rec.Level) {
		return h.next.Handle(ctx, rec)
	}
	return nil
}

func (h *recordingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &recordingHandler{r: h.r, attrs: append(slices.Clip(h.attrs), as...), next: h.next.WithAttrs(as)}
}

func (h *recordingHandler) WithGroup(name string) slog.Handler {
	return &recordingHandler{r: h.r, attrs: h.attrs, next: h.next.WithGroup(name)}
}
