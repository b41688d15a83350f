package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/federation"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"
)

// session is one client connection. Its run goroutine owns the control stream and accepts
// streams; each stream gets its own goroutine(s), tracked by wg, so that one stream blocked
// on flow control never holds up another (invariant I4/I5).
type session struct {
	n    *Node
	conn *quic.Conn
	log  *slog.Logger

	ctx    context.Context // ends when the connection ends
	cancel context.CancelFunc
	ready  chan struct{} // closed after WELCOME: streams wait for it

	peer     bool            // another node of the mesh (ALPN quicmq-peer/1, mutual TLS)
	peerName string          // its name, from its certificate
	actor    *auth.Principal // who the session acts for: set before ready closes
	// version is the client protocol version spoken on the connection: negotiated in HELLO
	// (wire.Negotiate), wire.PeerVersion with a peer. Set before ready closes.
	version uint64
	// tenant is the tenant whose connection count the session holds (addTenantConn), ""
	// for none: set by the handshake, released when the session ends.
	tenant   string
	draining atomic.Bool
	subs     atomic.Int64 // open subscription streams
	wg       sync.WaitGroup

	mu struct {
		sync.Mutex
		control  *quic.Stream
		handlers map[streamHandler]struct{}
	}
}

// streamHandler is an open stream's handler, told to finish when the node drains.
type streamHandler interface {
	drain()
}

func newSession(n *Node, conn *quic.Conn) *session {
	ctx, cancel := context.WithCancel(conn.Context())
	s := &session{
		n:      n,
		conn:   conn,
		log:    n.log.With("remote", conn.RemoteAddr().String()),
		ctx:    ctx,
		cancel: cancel,
		ready:  make(chan struct{}),
	}
	s.mu.handlers = make(map[streamHandler]struct{})
	s.peer = conn.ConnectionState().TLS.NegotiatedProtocol == wire.PeerALPN
	if s.peer {
		s.peerName = conn.ConnectionState().TLS.PeerCertificates[0].Subject.CommonName
		s.log = s.log.With("peer", s.peerName)
		s.actor = auth.PeerActor
		s.version = wire.PeerVersion
	}
	return s
}

// run serves the connection until it ends, then waits for every stream goroutine.
func (s *session) run() {
	s.n.metrics.connections.Inc()
	defer s.n.metrics.connections.Dec()
	defer func() { // after wg.Wait: the handshake's goroutine set it
		if s.tenant != "" {
			s.n.removeTenantConn(s.tenant)
		}
	}()
	defer s.wg.Wait()
	defer s.cancel()

	if s.peer {
		// Peers are authenticated by mutual TLS: no control stream, no HELLO.
		close(s.ready)
		s.acceptStreams()
		return
	}
	// The first stream is the control stream (QUIC hands streams over in the order of their
	// IDs). Its goroutine runs the handshake; streams accepted meanwhile wait for ready.
	ctx, cancel := context.WithTimeout(s.ctx, s.n.cfg.HandshakeTimeout)
	ctl, err := s.conn.AcceptStream(ctx)
	cancel()
	if err != nil {
		s.conn.CloseWithError(wire.AppProtocol, "no control stream")
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.handshake(ctl); err != nil {
			s.log.Info("connection refused", "err", err)
			s.cancel()
		}
	}()
	s.acceptStreams()
}

func (s *session) acceptStreams() {
	for {
		str, err := s.conn.AcceptStream(s.ctx)
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveStream(str)
		}()
	}
}

// handshake runs the control stream: HELLO in, WELCOME (or ERROR and close) out, then waits
// for the connection to end so the stream stays open.
func (s *session) handshake(str *quic.Stream) error {
	s.mu.Lock()
	s.mu.control = str
	s.mu.Unlock()
	str.SetReadDeadline(time.Now().Add(s.n.cfg.HandshakeTimeout))
	f, err := wire.NewReader(str, s.n.limits).Read()
	str.SetReadDeadline(time.Time{})
	if err != nil {
		s.conn.CloseWithError(wire.AppProtocol, "no HELLO")
		return err
	}
	hello, ok := f.(*wire.Hello)
	if !ok {
		return s.refuse(str, wire.AppProtocol, wire.Errorf(wire.CodeProtocol, "the first stream must start with HELLO, got %s", f.Type()))
	}
	version, ok := wire.Negotiate(hello.Version)
	if !ok {
		return s.refuse(str, wire.AppProtocol, wire.Errorf(wire.CodeVersion, "protocol version %d not supported; this node speaks %d to %d", hello.Version, wire.MinVersion, wire.Version))
	}
	if c := s.n.cfg.maxVersion; c != 0 {
		version = min(version, c)
	}
	s.version = version
	subject := ""
	if certs := s.conn.ConnectionState().TLS.PeerCertificates; len(certs) > 0 {
		subject = certs[0].Subject.CommonName // verified against the mesh CA by the handshake
	}
	actor := s.n.creds.Authenticate(hello.Token, subject)
	if actor == nil {
		what := "the token is missing or not valid on this node"
		if subject != "" {
			what = fmt.Sprintf("the token is missing or not valid, and the client certificate %q is not a credential on this node", subject)
		}
		return s.refuse(str, wire.AppUnauthorized, wire.Errorf(wire.CodeUnauthorized, "%s", what))
	}
	if actor.Tenant != "" {
		if e := s.n.addTenantConn(actor.Tenant); e != nil {
			return s.refuse(str, wire.AppLimit, e)
		}
		s.tenant = actor.Tenant
	}
	s.actor = actor
	c := s.n.cfg
	w := wire.NewWriter(str)
	w.Write(&wire.Welcome{
		Version: version, Node: c.Name, Region: c.Region,
		MaxPayload: uint64(c.MaxPayload), MaxFrame: uint64(s.n.limits.MaxFrame),
		MaxSubscriptions: uint64(c.MaxSubscriptionsPerConn), MaxStreams: uint64(c.MaxStreamsPerConn),
	})
	if err := w.Flush(); err != nil {
		return err
	}
	s.log = s.log.With("client", hello.Client, "as", actor.Name)
	close(s.ready)
	// The client sends nothing more on the control stream, and nothing here reads it: an
	// idle connection costs no goroutine of its own at the node beyond its streams' (a
	// reader parked in io.Copy held a goroutine and an 8 KiB buffer per connection, a
	// quarter of an idle connection's memory).
	return nil
}

func (s *session) refuse(str *quic.Stream, app quic.ApplicationErrorCode, e *wire.Error) error {
	w := wire.NewWriter(str)
	w.Write(&wire.ErrorFrame{Code: e.Code, Message: e.Message})
	w.Flush()
	str.Close()
	// Give the ERROR frame a moment to leave before the connection closes.
	select {
	case <-time.After(50 * time.Millisecond):
	case <-s.ctx.Done():
	}
	s.conn.CloseWithError(app, e.Message)
	return e
}

// peerRegion is the region gossip places the peer in ("" when gossip does not know it).
func (s *session) peerRegion() string {
	if s.n.gossip == nil {
		return ""
	}
	for _, m := range s.n.gossip.Members() {
		if m.Name == s.peerName {
			return m.Region
		}
	}
	return ""
}

// addTenantConn counts a connection of tenant, refusing it past MaxConnsPerTenant.
func (n *Node) addTenantConn(tenant string) *wire.Error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if got := n.mu.tenants[tenant]; got >= n.cfg.MaxConnsPerTenant {
		return wire.Errorf(wire.CodeLimit, "tenant %q has %d connections open to this node, the limit is %d", tenant, got, n.cfg.MaxConnsPerTenant)
	}
	n.mu.tenants[tenant]++
	return nil
}

func (n *Node) removeTenantConn(tenant string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.tenants[tenant]--; n.mu.tenants[tenant] <= 0 {
		delete(n.mu.tenants, tenant)
	}
}

// serveStream waits for the handshake, reads the stream's first frame and hands the stream
// to the handler of its kind.
func (s *session) serveStream(str *quic.Stream) {
	select {
	case <-s.ready:
	case <-s.ctx.Done():
		str.CancelRead(wire.AppProtocol)
		str.CancelWrite(wire.AppProtocol)
		return
	}
	// Most streams carry little from the client (a SUBSCRIBE and ACKs): start with a small
	// buffer; a publish stream gets a larger one on top of it.
	r := wire.NewReaderSize(str, s.n.limits, 2<<10)
	f, err := r.Read()
	if err != nil {
		s.streamError(str, err)
		return
	}
	if federation.IsPeerFrame(f) {
		if !s.peer || s.n.fed == nil {
			s.failStream(str, wire.Errorf(wire.CodeForbidden, "%s is for node-to-node links of a mesh", f.Type()))
			return
		}
		if err := s.n.fed.ServeStream(s.ctx, s.conn, str, r, f); err != nil {
			s.log.Debug("peer stream ended", "err", err)
		}
		return
	}
	if tc, ok := f.(*wire.TopicCreate); ok && s.n.rep != nil {
		s.serveReplicatedCreate(str, r, tc) // replcreate.go: placed by the region's metadata group
		return
	}
	switch f := f.(type) {
	case *wire.PublishOpen, *wire.Publish, *wire.PublishBatch, *wire.PublishMulti:
		if s.peer && s.peerRegion() != s.n.cfg.Region {
			s.failStream(str, wire.Errorf(wire.CodeForbidden, "nodes of other regions do not publish here; records cross regions by mirroring"))
			return
		}
		pr := wire.NewReaderSize(r.Bytes(), s.n.limits, 32<<10)
		var anyOrder bool
		if o, ok := f.(*wire.PublishOpen); ok {
			if !s.peer && s.version < 4 {
				s.failStream(str, wire.Errorf(wire.CodeProtocol, "PUBLISH_OPEN is a frame of protocol version 4; this connection speaks %d", s.version))
				return
			}
			anyOrder = o.Flags&wire.PublishAnyOrder != 0
			next, err := pr.Read()
			if err != nil {
				s.streamError(str, err)
				return
			}
			switch next.(type) {
			case *wire.Publish, *wire.PublishBatch, *wire.PublishMulti:
				f = next
			default:
				s.failStream(str, wire.Errorf(wire.CodeProtocol, "PUBLISH_OPEN is followed by PUBLISH, PUBLISH_BATCH or PUBLISH_MULTI, got %s", next.Type()))
				return
			}
		}
		p := newPublisher(s, str, pr)
		p.anyOrder = anyOrder
		if !s.track(p) {
			s.refusePublishes(str, f) // the session drains: the node shuts down
			return
		}
		p.run(f)
		s.untrack(p)
	case *wire.Subscribe:
		if f.Region == ablationSharedRegion {
			s.serveShared(str, r, f) // node/ablation.go, node/sharedstream: a measurement aid, off by default
			return
		}
		s.subscribe(str, r, f)
	case *wire.Topics:
		s.listTopics(str, f)
	case *wire.Consumers, *wire.ConsumerReset, *wire.ConsumerDelete, *wire.TopicCreate, *wire.TopicRemove:
		if s.peer && s.peerRegion() != s.n.cfg.Region {
			s.failStream(str, wire.Errorf(wire.CodeForbidden, "nodes of other regions do not manage this region's consumers or topics"))
			return
		}
		s.manage(str, f) // manage.go, node/manage
	case *wire.Hold:
		s.serveHold(str, r, f) // durables.go, node/subscriptions
	case *wire.GroupStore:
		s.serveGroupStore(str, f) // grouprepl.go
	default:
		s.failStream(str, wire.Errorf(wire.CodeProtocol, "a stream cannot start with %s", f.Type()))
	}
}

// refusePublishes answers a publish stream opened while the session drains as a draining
// publisher answers (docs/protocol.md "Connections"): the node stops reading (STOP_SENDING
// 0x3), and each publish of what it read, the stream's first frame, is answered with
// PUBLISH_ERROR 11 (nothing appended), so the client publishes them elsewhere at once
// instead of learning it only when the connection closes.
func (s *session) refusePublishes(str *quic.Stream, first wire.Frame) {
	str.CancelRead(wire.AppShutdown)
	e := wire.Errorf(wire.CodeShuttingDown, "node shutting down: nothing was appended")
	w := wire.NewWriter(str)
	switch f := first.(type) {
	case *wire.Publish:
		w.Write(&wire.PublishError{Seq: f.Seq, Code: e.Code, Message: e.Message})
	case *wire.PublishBatch:
		for k := range f.Publishes {
			w.Write(&wire.PublishError{Seq: f.Seq + uint64(k), Code: e.Code, Message: e.Message})
		}
	case *wire.PublishMulti:
		if s.peer || s.version >= wire.MultiVersion { // else not a frame of this connection: no answer
			for k := range f.Publishes {
				w.Write(&wire.PublishError{Seq: f.Seq + uint64(k), Code: e.Code, Message: e.Message})
			}
		}
	}
	w.Flush()
	str.Close()
}

// track registers h to be drained at shutdown; false if the node is already draining.
func (s *session) track(h streamHandler) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining.Load() {
		return false
	}
	s.mu.handlers[h] = struct{}{}
	return true
}

func (s *session) untrack(h streamHandler) {
	s.mu.Lock()
	delete(s.mu.handlers, h)
	s.mu.Unlock()
}

// drain asks every stream to finish (publishers answer what they read, subscriptions end),
// tells the client on the control stream, and waits for the stream goroutines.
func (s *session) drain() {
	s.mu.Lock()
	s.draining.Store(true)
	hs := make([]streamHandler, 0, len(s.mu.handlers))
	for h := range s.mu.handlers {
		hs = append(hs, h)
	}
	control := s.mu.control
	s.mu.Unlock()
	for _, h := range hs {
		h.drain()
	}
	if control != nil {
		w := wire.NewWriter(control)
		w.Write(&wire.ErrorFrame{Code: wire.CodeShuttingDown, Message: "node shutting down"})
		w.Flush()
	}
	// Stream goroutines end once their handlers finished; the accept loop and the control
	// stream end when the connection closes, which the node does after this returns.
	s.waitHandlers()
}

func (s *session) waitHandlers() {
	for {
		s.mu.Lock()
		n := len(s.mu.handlers)
		s.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// streamError answers a stream whose frames could not be read.
func (s *session) streamError(str *quic.Stream, err error) {
	var se *quic.StreamError
	var ae *quic.ApplicationError
	switch {
	case errors.Is(err, io.EOF), errors.As(err, &se), errors.As(err, &ae), s.ctx.Err() != nil:
		str.CancelRead(wire.AppCancelled)
		str.CancelWrite(wire.AppCancelled)
	case errors.Is(err, wire.ErrFrameTooLarge):
		s.failStream(str, &wire.Error{Code: wire.CodeTooLarge, Message: err.Error()})
	default:
		s.failStream(str, &wire.Error{Code: wire.CodeProtocol, Message: err.Error()})
	}
}

// failStream sends ERROR and ends the stream in both directions.
func (s *session) failStream(str *quic.Stream, e *wire.Error) {
	w := wire.NewWriter(str)
	w.Write(&wire.ErrorFrame{Code: e.Code, Message: e.Message})
	w.Flush()
	str.Close()
	str.CancelRead(wire.AppProtocol)
	s.log.Debug("stream failed", "err", e)
}
