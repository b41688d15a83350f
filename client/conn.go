package client

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/liveness"
	"github.com/quicmq/quicmq/internal/wire"
)

// Conn is one QUIC connection to a node. All its methods are safe for concurrent use.
type Conn struct {
	addrs []nodeAddr // the nodes Dial was given, in order, then Options.Failover's (failover.go)
	home  int        // addrs[:home] are the home region's nodes; a reconnect tries the next one first
	opts  Options
	// region is the home region: that of the first WELCOME of a home node; every later
	// connection to a home node must be in it. Read and written by dials, which are serial.
	region   string
	welcomed bool        // a WELCOME was read: lim is set
	lim      wire.Limits // what the node announced in the first WELCOME (payload, frame), defaults otherwise
	failover failover    // Options.Failover (failover.go)

	window  chan struct{} // one token per unanswered publish (the pipelining window)
	flush   flushEpochs   // unanswered publishes by Flush epoch
	closing chan struct{} // closed by Close before the connection is torn down
	stop    context.CancelFunc
	stopCtx context.Context // cancelled by Close: ends a resend in progress
	once    sync.Once
	wg      sync.WaitGroup // the control reader, the publisher's two goroutines, the resender

	// Options.Idempotent: the Conn's producer ID and the last Sequence it gave a publish.
	producer string
	lastSeq  atomic.Uint64
	// resend is set with Idempotent and Reconnect: publishes in flight when their stream was
	// lost are sent again (publish.go, resend.go).
	resend bool
	rs     struct {
		sync.Mutex
		active  bool            // the resender runs: new publishes join backlog instead of a stream
		backlog []*Future       // to send, in order, on the next publish stream
		waits   []chan struct{} // writerDone of failed streams whose futures were handed over
	}

	watched watchStats // the connections' watchers (watch.go)
	mig     migration  // Migrate and the address watcher (migrate.go)

	pubMu    sync.Mutex // serialises starting a publish stream, which may wait for stream credit
	redialMu sync.Mutex // serialises reconnecting (Options.Reconnect)
	mu       struct {
		sync.Mutex
		closed bool  // set with closing; after it no goroutine may be added to wg
		cur    *link // the current connection; replaced by redial after it was lost
		// away are connections replaced while still up (their node going away): each
		// answers what it took until the node closes it; Close closes them.
		away map[*link]struct{}
		pub  *publisher // the current publish stream; replaced when it failed
	}
}

// nodeAddr is one address Dial was given, resolved, with its TLS configuration (the server
// name is its host).
type nodeAddr struct {
	addr  string
	raddr *net.UDPAddr
	tls   *tls.Config
}

// link is one QUIC connection of a Conn, with the socket and transport it owns.
type link struct {
	at     int // index in Conn.addrs
	addr   string
	node   string // the node's name, from its WELCOME
	region string // the node's region, from its WELCOME
	udp    *net.UDPConn
	tr     *quic.Transport
	qc     *quic.Conn
	probe  *liveness.Probe // sees the packets of every socket of the connection (watch.go)
	// offer is the protocol version said in HELLO, version the one the node answered with
	// (wire.Negotiate): version 1 with a node of an older build.
	offer, version uint64

	// goingAway: the node said on the control stream that it shuts down (ERROR 11). It
	// answers what it read and then closes the connection; with Options.Reconnect and
	// another node to go to, the next stream is opened on a new connection at once
	// (live) instead of after the close: a rolling restart's publishes do not wait for it.
	goingAway atomic.Bool

	mu    sync.Mutex
	cause error // why the node ended the connection (ERROR on the control stream)
	// The sockets migrations moved the connection to (migrate.go), and the one in use. Every
	// socket stays open for the connection's life: quic-go ends the connection when its first
	// transport closes, even after a switch.
	paths  []*quic.Transport
	local  string
	closed bool // the sockets are closed: a migration that completes late closes its own
}

// close closes the connection with code and reason, then its sockets.
func (l *link) close(code quic.ApplicationErrorCode, reason string) {
	l.qc.CloseWithError(code, reason)
	l.closeSockets()
}

// closeSockets closes the transports and sockets of the connection (which must be over, or
// be meant to end).
func (l *link) closeSockets() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	paths := l.paths
	l.paths, l.closed = nil, true
	l.mu.Unlock()
	l.tr.Close()
	l.udp.Close()
	for _, tr := range paths {
		tr.Close()
		tr.Conn.Close()
	}
}

// Dial connects to a node of one region: a QUIC handshake with TLS 1.3 and ALPN "quicmq/1",
// then HELLO on the control stream. It returns when the node answered WELCOME, or with the
// node's refusal as an *Error (CodeUnauthorized for a bad token). ctx bounds the whole
// exchange; it does not affect the Conn afterwards.
//
// addrs ("host:port" each, or Options.Addrs when none is given) may name several nodes of one
// region: Dial takes the first that answers, in order, and with Options.Reconnect a lost
// connection is dialed again starting with the next node in the list, so the Conn outlives
// any one node of the region. Every node must be in the region of the first that answered
// (offsets, durable positions and de-duplication are the region's); one of another region is
// skipped. A node that does not answer costs its handshake timeout (5 s) before the next is
// tried; an address where nothing listens on the UDP port fails within a round trip
// (errors.Is(err, syscall.ECONNREFUSED), "connection refused") and the next is tried at once,
// as long as the host answers with ICMP port unreachable (loopback and most LANs do; a
// firewall that drops ICMP leaves the handshake timeout).
func Dial(ctx context.Context, opts Options, addrs ...string) (*Conn, error) {
	if len(addrs) == 0 {
		addrs = opts.Addrs
	}
	if len(addrs) == 0 {
		return nil, errors.New("client: dial: no node address given (pass one or more host:port, or set Options.Addrs)")
	}
	opts = opts.withDefaults()
	c := &Conn{
		opts:    opts,
		lim:     wire.DefaultLimits(),
		window:  make(chan struct{}, opts.MaxPendingPublishes),
		closing: make(chan struct{}),
		resend:  opts.Idempotent && opts.Reconnect,
	}
	c.flush.init()
	base, err := opts.tlsConfig() // the CA file is read once, whatever the number of nodes
	if err != nil {
		return nil, err
	}
	c.home = len(addrs)
	for i, a := range append(addrs[:len(addrs):len(addrs)], opts.Failover...) {
		what := "dial"
		if i >= c.home {
			what = "failover address"
		}
		if strings.Contains(a, ",") {
			return nil, fmt.Errorf("client: %s %q: an address holds one node; pass several nodes as separate addresses", what, a)
		}
		a = strings.TrimSpace(a)
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("client: %s %q: %w", what, a, err)
		}
		raddr, err := net.ResolveUDPAddr("udp", a)
		if err != nil {
			return nil, fmt.Errorf("client: %s %s: %w", what, a, err)
		}
		conf := base.Clone()
		if conf.ServerName == "" {
			conf.ServerName = host
		}
		c.addrs = append(c.addrs, nodeAddr{addr: a, raddr: raddr, tls: conf})
	}
	if opts.Idempotent {
		var id [16]byte
		if _, err := rand.Read(id[:]); err != nil {
			return nil, fmt.Errorf("client: dial %s: producer id: %w", addrs[0], err)
		}
		c.producer = hex.EncodeToString(id[:])
	}
	l, r, err := c.dialAny(ctx, 0)
	if err != nil {
		return nil, err
	}
	c.stopCtx, c.stop = context.WithCancel(context.Background())
	c.mu.cur = l
	c.wg.Add(1)
	go c.readControl(l, r)
	c.watchRoute()
	return c, nil
}

// dialLink makes a new connection, trying the home region's nodes in order from the one at
// index first (round the list): the first that completes the handshake and answers WELCOME in
// the Conn's region wins. With one node its error is returned as it is; with several, each
// node's.
func (c *Conn) dialLink(ctx context.Context, first int) (*link, *wire.Reader, error) {
	var errs []error
	for i := range c.home {
		at := (first + i) % c.home
		l, r, err := c.dialNode(ctx, at)
		if err == nil {
			return l, r, nil
		}
		if c.home == 1 {
			return nil, nil, err
		}
		if refused(err, func(c Code) bool { return c == CodeUnauthorized }) {
			return nil, nil, err // credentials every node of the region would refuse
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, nil, nodesError(errs)
}

// nodesError is the failure of a dial that tried several nodes: each node's error, in the
// order they were tried.
type nodesError []error

func (e nodesError) Error() string {
	msgs := make([]string, len(e))
	for i, err := range e {
		msgs[i] = text(err)
	}
	return "client: " + strings.Join(msgs, "; ")
}

func (e nodesError) Unwrap() []error { return e }

// refused reports whether err is the node's refusal with a code for which is true. A dial
// of several nodes counts as refused only when every node refused so.
func refused(err error, is func(Code) bool) bool {
	var ne nodesError
	if errors.As(err, &ne) {
		for _, err := range ne {
			if !refused(err, is) {
				return false
			}
		}
		return len(ne) > 0
	}
	var e *Error
	return errors.As(err, &e) && is(e.Code)
}

// forGood is true of the codes a node refuses with for good (unauthorized, forbidden, an
// invalid request...), not of those of a node stopping or of a topic's owner out of reach.
func forGood(c Code) bool {
	// CodeConflict: an exclusive durable still held by this client's lost connection, until the
	// node notices it is gone.
	return c != CodeShuttingDown && c != CodeUnavailable && c != CodeConflict
}

// dialNode makes a new connection to the node at index at of the Conn's list: the QUIC
// handshake on a socket of its own, then HELLO and WELCOME. The returned Reader continues on
// the control stream.
func (c *Conn) dialNode(ctx context.Context, at int) (*link, *wire.Reader, error) {
	offer := uint64(wire.Version)
	if c.opts.offer != 0 {
		offer = min(c.opts.offer, offer)
	}
	l, r, err := c.dialNodeVersion(ctx, at, offer)
	if refused(err, func(c Code) bool { return c == CodeVersion }) {
		// A node of an older build speaks only version 1 and closed the connection: say
		// hello again, in version 1, on a new one.
		l, r, err = c.dialNodeVersion(ctx, at, wire.MinVersion)
	}
	return l, r, err
}

// dialNodeVersion is dialNode offering protocol version offer in HELLO.
func (c *Conn) dialNodeVersion(ctx context.Context, at int, offer uint64) (*link, *wire.Reader, error) {
	a := c.addrs[at]
	network, udp, err := newSocket(a.raddr)
	if err != nil {
		return nil, nil, wrap("dial "+a.addr, fmt.Errorf("local socket: %w", err))
	}
	probe := liveness.NewProbe(&c.watched.probes)
	tr := &quic.Transport{Conn: probe.Wrap(udp)}
	// The probe (probe.go) ends the handshake at once when nothing listens on the port.
	hctx, cancel := context.WithCancelCause(ctx)
	stopProbe := startProbe(network, a.raddr, func(err error) { cancel(&refusedError{err: err}) })
	qc, err := tr.Dial(hctx, a.raddr, a.tls, c.opts.quicConfig())
	stopProbe()
	var re *refusedError
	if err != nil && ctx.Err() == nil && errors.As(context.Cause(hctx), &re) {
		err = re
	}
	cancel(nil) // the connection does not depend on hctx after the handshake
	if err != nil {
		tr.Close()
		udp.Close()
		return nil, nil, wrap("dial "+a.addr, err)
	}
	l := &link{at: at, addr: a.addr, udp: udp, tr: tr, qc: qc, probe: probe, local: udp.LocalAddr().String(), offer: offer}
	r, err := c.hello(ctx, l)
	if err != nil {
		l.close(wire.AppNoError, "")
		return nil, nil, wrap("dial "+a.addr, err)
	}
	c.mig.handshakes.Add(1)
	return l, r, nil
}

// newSocket opens a UDP socket on a new port of every local address, of raddr's family.
func newSocket(raddr *net.UDPAddr) (network string, udp *net.UDPConn, err error) {
	network, local := "udp4", &net.UDPAddr{IP: net.IPv4zero}
	if raddr.IP.To4() == nil {
		network, local = "udp6", &net.UDPAddr{IP: net.IPv6unspecified}
	}
	udp, err = net.ListenUDP(network, local)
	return network, udp, err
}

// current returns the connection in use.
func (c *Conn) current() *link {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.cur
}

// live returns the connection to open a stream on: the current one, or, with
// Options.Reconnect, a new one when the current one was lost.
func (c *Conn) live(ctx context.Context) (*link, error) {
	l := c.current()
	if !c.opts.Reconnect || c.usable(l) {
		return l, nil
	}
	c.redialMu.Lock()
	defer c.redialMu.Unlock()
	if l = c.current(); c.usable(l) {
		return l, nil // another operation reconnected meanwhile
	}
	nl, r, err := c.dialAny(ctx, l.at+1)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		nl.close(wire.AppNoError, "client closed")
		return nil, ErrClosed
	}
	old := c.mu.cur
	c.mu.cur = nl
	c.wg.Add(1)
	c.mu.Unlock()
	if nl.region != old.region {
		c.failover.moves.Add(1) // to another region, or back (failover.go)
	}
	go c.readControl(nl, r)
	// Replaced while up (its node going away), the old connection answers what it took
	// until the node closes it; its control reader then closes the sockets. One already
	// gone (or whose reader ended before it was listed) has them closed here.
	c.mu.Lock()
	if c.mu.away == nil {
		c.mu.away = map[*link]struct{}{}
	}
	c.mu.away[old] = struct{}{}
	c.mu.Unlock()
	if old.qc.Context().Err() != nil {
		c.mu.Lock()
		delete(c.mu.away, old)
		c.mu.Unlock()
		old.closeSockets()
	}
	return nl, nil
}

// usable reports whether new streams go on connection l: it is up, and its node did not
// say it shuts down while there is another node to go to.
func (c *Conn) usable(l *link) bool {
	return l.qc.Context().Err() == nil && (!l.goingAway.Load() || len(c.addrs) < 2)
}

// retryReconnect is the Options.Reconnect policy, shared by subscriptions that resume and
// publishes that are resent: it calls attempt until it works, ctx ends, the Conn is closed,
// or the node refuses for good (any *Error but shutting down or unavailable). While the node
// is down or restarting each attempt fails on the network, and the next one waits a little
// longer (100 ms, doubling up to reconnectMaxWait, less up to a fifth at random so that the
// clients of one node do not all come back in the same instant). A node that comes back is
// reached within about a second of its return; one still down refuses each attempt within a
// round trip, at no cost to it (Kafka's reconnect.backoff.max.ms is 1 s too).
func retryReconnect(ctx context.Context, attempt func(context.Context) error) error {
	wait := 100 * time.Millisecond
	for {
		err := attempt(ctx)
		switch {
		case err == nil, ctx.Err() != nil, errors.Is(err, ErrClosed):
			return err
		case refused(err, forGood):
			return err // refused: unauthorized, forbidden, an invalid request...
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, reconnectMaxWait)
		wait -= mrand.N(wait / 5)
	}
}

// reconnectMaxWait bounds the pause between two reconnect attempts (retryReconnect).
const reconnectMaxWait = time.Second

// hello opens the control stream, sends HELLO and waits for WELCOME. The returned Reader
// continues on the control stream.
func (c *Conn) hello(ctx context.Context, l *link) (*wire.Reader, error) {
	// Cancelling ctx tears the connection down, which unblocks every read below; the dial
	// then throws the connection away.
	stop := context.AfterFunc(ctx, func() { l.qc.CloseWithError(wire.AppCancelled, "dial cancelled") })
	r, err := c.helloExchange(ctx, l)
	if !stop() && err == nil {
		return nil, ctx.Err() // cancelled just as WELCOME arrived: the connection is closing
	}
	return r, err
}

func (c *Conn) helloExchange(ctx context.Context, l *link) (*wire.Reader, error) {
	fail := func(err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var e *Error
		if isConnError(err) && errors.As(connCause(err), &e) {
			return e // the node refused the connection: its reason is the dial's
		}
		return c.linkErr(l, err)
	}
	ctrl, err := l.qc.OpenStreamSync(ctx)
	if err != nil {
		return nil, fail(err)
	}
	hello := &wire.Hello{Version: l.offer, Client: c.opts.Name, Token: c.opts.Token}
	if _, err := ctrl.Write(wire.Append(nil, hello)); err != nil {
		return nil, fail(err)
	}
	r := wire.NewReader(ctrl, wire.Limits{})
	f, err := r.Read()
	if err != nil {
		return nil, fail(err)
	}
	switch f := f.(type) {
	case *wire.Welcome:
		if f.Version < wire.MinVersion || f.Version > l.offer {
			return nil, errorf(CodeVersion, "node answered HELLO of version %d with version %d; this client speaks %d to %d", l.offer, f.Version, wire.MinVersion, wire.Version)
		}
		l.version = f.Version
		if !c.welcomed { // the first WELCOME: the Conn keeps these (read without a lock)
			c.welcomed = true
			c.lim.MaxPayload = clampLimit(f.MaxPayload, c.lim.MaxPayload)
			c.lim.MaxFrame = clampLimit(f.MaxFrame, c.lim.MaxFrame)
		}
		switch {
		case l.at >= c.home: // a failover node: any region (failover.go)
		case c.region == "":
			c.region = f.Region
		case f.Region != c.region:
			return nil, errorf(CodeInvalidArgument, "node %q is in region %q, this connection's region is %q: "+
				"a connection moves only between nodes of one region (offsets and de-duplication are per region)",
				f.Node, f.Region, c.region)
		}
		l.node, l.region = f.Node, f.Region
		return r, nil
	case *wire.ErrorFrame:
		return nil, fromWire(f.Code, f.Message)
	default:
		return nil, errorf(CodeProtocol, "node answered HELLO with %s", f.Type())
	}
}

// ctxOr reports ctx's error when ctx ended the handshake, else the connection's error.
func (c *Conn) ctxOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return c.streamErr(err)
}

// clampLimit takes a limit the node announced; zero (not announced) keeps the default and a
// value beyond what a frame can carry is capped.
func clampLimit(announced uint64, def int) int {
	switch {
	case announced == 0:
		return def
	case announced > 1<<31:
		return 1 << 31
	}
	return int(announced)
}

// readControl owns the control stream's reading side after WELCOME, for the Conn's life. The
// node sends only ERROR on it (e.g. shutting down) before closing the connection; that error
// becomes the cause every later failure names.
func (c *Conn) readControl(l *link, r *wire.Reader) {
	defer c.wg.Done()
	defer func() {
		c.mu.Lock()
		_, away := c.mu.away[l]
		delete(c.mu.away, l)
		c.mu.Unlock()
		if away {
			l.closeSockets() // replaced while up (live): nothing else closes them
		}
	}()
	defer c.watch(l)()
	if l.at >= c.home && c.opts.Reconnect && c.opts.FailbackCheck > 0 {
		done := make(chan struct{})
		go func() { defer close(done); c.failback(l) }()
		defer func() { <-done }()
	}
	for {
		f, err := r.Read()
		if err != nil {
			return // the connection is gone; its context holds the reason
		}
		if e, ok := f.(*wire.ErrorFrame); ok {
			l.setCause(fromWire(e.Code, e.Message))
			if e.Code == wire.CodeShuttingDown {
				l.goingAway.Store(true)
			}
			continue
		}
		l.setCause(errorf(CodeProtocol, "node sent %s on the control stream", f.Type()))
		l.qc.CloseWithError(wire.AppProtocol, "unexpected frame on the control stream")
		return
	}
}

func (l *link) setCause(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cause == nil {
		l.cause = err
	}
}

// streamErr turns the error of a stream operation into what applications see: ErrClosed
// after Close; the node's reason when it ended the connection; a lost connection named as
// such; the node's code when it reset the stream.
func (c *Conn) streamErr(err error) error { return c.linkErr(c.current(), err) }

// linkErr is streamErr for an operation on connection l (nil: none yet).
func (c *Conn) linkErr(l *link, err error) error {
	select {
	case <-c.closing:
		return ErrClosed
	default:
	}
	var cause error
	if l != nil {
		l.mu.Lock()
		cause = l.cause
		l.mu.Unlock()
	}
	if cause == nil && isConnError(err) {
		cause = connCause(err)
	}
	if cause == nil && l != nil && l.qc.Context().Err() != nil {
		cause = connCause(context.Cause(l.qc.Context()))
	}
	if cause != nil {
		name := "the node"
		if l != nil {
			name = l.addr
		}
		return wrap("connection to "+name+" lost", cause)
	}
	var se *quic.StreamError
	if errors.As(err, &se) && se.Remote {
		if e := appError(quic.ApplicationErrorCode(se.ErrorCode), "stream reset by the node"); e != nil {
			return e
		}
	}
	return err
}

// isConnError reports whether err is the failure of the whole connection, which stream
// operations return once it is closed (possibly before the connection's context is done).
func isConnError(err error) bool {
	var (
		ae *quic.ApplicationError
		te *quic.TransportError
		it *quic.IdleTimeoutError
		ht *quic.HandshakeTimeoutError
		sr *quic.StatelessResetError
	)
	return errors.As(err, &ae) || errors.As(err, &te) || errors.As(err, &it) || errors.As(err, &ht) || errors.As(err, &sr)
}

// connCause maps the reason a connection closed to an *Error when the node closed it with
// one of the protocol's application error codes.
func connCause(err error) error {
	var ae *quic.ApplicationError
	if errors.As(err, &ae) && ae.Remote {
		if e := appError(ae.ErrorCode, ae.ErrorMessage); e != nil {
			return e
		}
	}
	return err
}

func appError(code quic.ApplicationErrorCode, msg string) *Error {
	var c Code
	switch code {
	case wire.AppProtocol:
		c = CodeProtocol
	case wire.AppUnauthorized:
		c = CodeUnauthorized
	case wire.AppShutdown:
		c = CodeShuttingDown
	case wire.AppLimit:
		c = CodeLimit
	default:
		return nil
	}
	return &Error{Code: c, Message: msg}
}

// Node returns the name and region of the node of the current connection, as it announced
// them in WELCOME (with several addresses and Options.Reconnect, the node may change; the
// region changes only by a failover to a node of Options.Failover).
func (c *Conn) Node() (name, region string) {
	l := c.current()
	return l.node, l.region
}

// Close closes the connection at once: publishes still pending fail with ErrClosed (wait for
// their Futures first to keep them; those already sent fail with an *OutcomeUnknownError
// wrapping ErrClosed, since the node may have stored them), subscriptions end, and a resend
// under way stops. It returns after every goroutine of
// the Conn exited and the socket is closed. Safe to call more than once.
func (c *Conn) Close() error {
	c.once.Do(func() {
		// After closed is set no reconnect installs a connection (live closes its own), so
		// the current one is the last.
		c.mu.Lock()
		c.mu.closed = true
		close(c.closing)
		l := c.mu.cur
		away := make([]*link, 0, len(c.mu.away))
		for a := range c.mu.away {
			away = append(away, a)
		}
		c.mu.Unlock()
		c.stop()
		l.qc.CloseWithError(wire.AppNoError, "client closed")
		for _, a := range away {
			a.qc.CloseWithError(wire.AppNoError, "client closed")
		}
		c.wg.Wait()
		l.closeSockets()
	})
	return nil
}

// openStream opens a new stream for one operation, waiting for stream credit within ctx.
func (c *Conn) openStream(ctx context.Context) (*quic.Stream, error) {
	s, _, err := c.openStreamOn(ctx)
	return s, err
}

// openStreamOn is openStream, also returning the connection the stream is on.
func (c *Conn) openStreamOn(ctx context.Context) (*quic.Stream, *link, error) {
	select {
	case <-c.closing:
		return nil, nil, ErrClosed
	default:
	}
	l, err := c.live(ctx)
	if err != nil {
		return nil, nil, err
	}
	s, err := l.qc.OpenStreamSync(ctx)
	if err != nil {
		return nil, nil, c.ctxOr(ctx, err)
	}
	return s, l, nil
}
