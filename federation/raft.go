package federation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/replica"
)

// The raft transport: replica's messages between the nodes of this region, over the links
// this node dialed. Each link to a node of the region carries two raft streams, opened with
// RAFT when its connection comes up: a control stream (votes, heartbeats, every response,
// timeout-now: what keeps leadership and commit moving) at QUIC urgency 0, and a bulk stream
// (appends and snapshots) at the urgency of every other stream, so that votes and heartbeats
// never wait behind a catch-up (the split etcd's rafthttp makes between its message and
// append streams). Each class has its own bounded queue per peer, drained by its own writer
// goroutine on the link's connection: a bulk write blocked on flow control holds up no
// heartbeat. Send never blocks the driver: it drops what does not fit, what has no open
// stream and what is larger than a frame, and counts it; raft resends. The receiving side
// (serveRaft) checks the opener, decodes each RAFT_BATCH and hands it to Config.Raft.Deliver.
//
// A node's raft ID comes from RaftNodeID (raftid.go): drawn once at random and kept in its
// data directory, so a node whose disk is lost returns with a new ID, never its old one.
// Peers carry each peer's ID (Peer.RaftID, from gossip); Send finds the link by it.

// Raft stream priorities (RFC 9218 urgency: lower is sooner; quic-go's default is 3).
const (
	raftControlUrgency = 0
	raftBulkUrgency    = 3
)

// RaftConfig configures the raft transport. The zero value is off.
type RaftConfig struct {
	// ID is this node's raft node ID in every group (RaftNodeID). 0: the transport is off:
	// Send drops everything, and peers' RAFT streams are refused.
	ID uint64
	// Deliver receives each batch of messages a node of this region sent here (the node
	// passes replica.Driver.Deliver). Called on the stream's goroutine, it must not block.
	// Required when ID is set.
	Deliver func([]replica.Message)
	// Fetch serves a peer's catch-up fetch (raftfetch.go): records [from, to) of a group's
	// log as applied here, at most maxBytes after the first, and the offset after the last
	// (the node passes replica.Driver.ReadChunk). nil: fetches are refused.
	Fetch func(group uint64, log string, from, to, maxBytes uint64) (chunk []byte, next uint64, err error)
	// QueueMessages bounds the messages waiting for one peer's stream of one class; more
	// are dropped. Default 4096.
	QueueMessages int
	// QueueBytes bounds the encoded bytes waiting for one peer's stream of one class.
	// Default 32 MiB.
	QueueBytes int
	// MaxFrame bounds the body of one RAFT_BATCH frame, sent and received: a batch is split
	// into frames under it, and a single message over it is dropped and counted. It must
	// exceed replica's MaxSizePerMsg (1 MiB) plus the largest entry. Default 16 MiB.
	MaxFrame int
	// RetryInterval is the pause before a raft stream that ended while its connection
	// stayed up (refused by the peer, reset) is opened again. Default 1 s.
	RetryInterval time.Duration

	// brokenOneStream, test only, sends control messages on the bulk stream, in order with
	// the appends: the priority test must catch it.
	brokenOneStream bool
}

func (c RaftConfig) validate() []error {
	var errs []error
	if c.ID != 0 && c.Deliver == nil {
		errs = append(errs, errors.New("federation: config: Raft.Deliver is required with Raft.ID"))
	}
	if c.QueueMessages < 0 || c.QueueBytes < 0 || c.MaxFrame < 0 || c.RetryInterval < 0 {
		errs = append(errs, fmt.Errorf("federation: config: Raft: QueueMessages %d, QueueBytes %d, MaxFrame %d and RetryInterval %v must not be negative",
			c.QueueMessages, c.QueueBytes, c.MaxFrame, c.RetryInterval))
	}
	if c.MaxFrame > 0 && c.MaxFrame < 64<<10 {
		errs = append(errs, fmt.Errorf("federation: config: Raft.MaxFrame %d is below 64 KiB", c.MaxFrame))
	}
	return errs
}

func (c RaftConfig) withDefaults() RaftConfig {
	if c.QueueMessages == 0 {
		c.QueueMessages = 4096
	}
	if c.QueueBytes == 0 {
		c.QueueBytes = 32 << 20
	}
	if c.MaxFrame == 0 {
		c.MaxFrame = 16 << 20
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = time.Second
	}
	return c
}

// raftState is the transport's per-peer state, by peer name; each peer's entry outlives
// its links (a reconnect) and is pruned when the peer has no link at a scrape.
type raftState struct {
	mu         sync.Mutex
	peers      map[string]*raftPeer
	unroutable atomic.Uint64 // messages for a raft ID no link of this region has
}

type raftPeer struct {
	class [2]raftClass // by wire.RaftControl, wire.RaftBulk
}

// raftClass is one peer's stream of one class: its queue, filled by Send on the driver's
// goroutine and drained by the writer goroutine of the link's current connection, and its
// counters.
type raftClass struct {
	wake chan struct{}
	mu   struct {
		sync.Mutex
		up    int // writers with the stream open (two for a moment when a link is replaced): Send queues while > 0, else drops
		q     []raftQueued
		bytes int
	}
	sentMsgs, sentBytes, recvMsgs, recvBytes atomic.Uint64
	dropFull, dropDown, dropLarge            atomic.Uint64
	opened                                   atomic.Uint64 // streams of the class opened to the peer
	serving                                  atomic.Int64  // streams of the peer's this node serves
}

type raftQueued struct {
	m    replica.Message
	size int // upper bound of its encoded size
}

func (s *raftState) peer(name string, create bool) *raftPeer {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.peers[name]
	if p == nil && create {
		if s.peers == nil {
			s.peers = make(map[string]*raftPeer)
		}
		p = &raftPeer{}
		for i := range p.class {
			p.class[i].wake = make(chan struct{}, 1)
		}
		s.peers[name] = p
	}
	return p
}

// Send queues msgs for the node of this region whose raft ID is to (replica.Transport). It
// never blocks; what cannot be sent is dropped and counted.
func (f *Federation) Send(to uint64, msgs []replica.Message) {
	var name string
	if f.cfg.Raft.ID != 0 {
		f.mu.Lock()
		for _, l := range f.mu.links {
			if l.peer.Region == f.cfg.Region && l.peer.RaftID == to {
				name = l.peer.Name
				break
			}
		}
		f.mu.Unlock()
	}
	if name == "" {
		f.raft.unroutable.Add(uint64(len(msgs)))
		return
	}
	p := f.raft.peer(name, true)
	var by [2][]raftQueued
	for _, m := range msgs {
		c := raftClassOf(m)
		if f.cfg.Raft.brokenOneStream {
			c = wire.RaftBulk
		}
		by[c] = append(by[c], raftQueued{m: m, size: proto.Size(m.Raft) + 24})
	}
	for c, q := range by {
		if len(q) > 0 {
			p.class[c].enqueue(q, f.cfg.Raft)
		}
	}
}

// raftClassOf is the stream a message travels on: appends and snapshots on the bulk
// stream, everything else on the control stream.
func raftClassOf(m replica.Message) byte {
	switch m.Raft.GetType() {
	case pb.MsgApp, pb.MsgSnap:
		return wire.RaftBulk
	}
	return wire.RaftControl
}

func (c *raftClass) enqueue(q []raftQueued, cfg RaftConfig) {
	c.mu.Lock()
	if c.mu.up == 0 {
		c.mu.Unlock()
		c.dropDown.Add(uint64(len(q)))
		return
	}
	for _, m := range q {
		switch {
		case m.size > cfg.MaxFrame-64:
			c.dropLarge.Add(1)
		case len(c.mu.q) >= cfg.QueueMessages || c.mu.bytes+m.size > cfg.QueueBytes:
			c.dropFull.Add(1)
		default:
			c.mu.q = append(c.mu.q, m)
			c.mu.bytes += m.size
		}
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// setUp counts a writer that opened its stream (true) or ended it (false). When none is
// left what is queued is dropped: stale by the time a new stream opens, and raft resends
// what still matters.
func (c *raftClass) setUp(up bool) {
	c.mu.Lock()
	dropped := 0
	if up {
		c.mu.up++
	} else if c.mu.up--; c.mu.up == 0 {
		dropped = len(c.mu.q)
		c.mu.q, c.mu.bytes = nil, 0
	}
	c.mu.Unlock()
	c.dropDown.Add(uint64(dropped))
}

func (c *raftClass) take() []raftQueued {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.mu.q
	c.mu.q, c.mu.bytes = nil, 0
	return q
}

func (c *raftClass) open() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.up > 0
}

func (c *raftClass) queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.mu.q)
}

// startRaft starts the writers of both raft streams on a new connection of link l, when l
// goes to a node of this region and the transport is on (link.serve's goroutine). They end
// with ctx, counted in wg.
func (f *Federation) startRaft(ctx context.Context, l *link, conn *quic.Conn, wg *sync.WaitGroup) {
	if f.cfg.Raft.ID == 0 || l.peer.Region != f.cfg.Region || l.peer.RaftID == 0 {
		return
	}
	p := f.raft.peer(l.peer.Name, true)
	for class := range p.class {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.runRaftClass(ctx, l, conn, byte(class), &p.class[class])
		}()
	}
}

// runRaftClass keeps the stream of one class open on conn until ctx ends, reopening it
// after RetryInterval when it fails while the connection lasts.
func (f *Federation) runRaftClass(ctx context.Context, l *link, conn *quic.Conn, class byte, c *raftClass) {
	last, repeats := "", 0 // the previous failure and how many times in a row it came
	for {
		err := f.writeRaft(ctx, l, conn, class, c)
		if ctx.Err() != nil || connectionEnded(err) {
			return
		}
		l.setError(err)
		if err.Error() == last {
			repeats++
		} else {
			last, repeats = err.Error(), 1
		}
		l.log.Log(ctx, raftRetryLevel(err, repeats), "raft stream ended; reopening", "class", raftClassName(class), "err", err, "after", f.cfg.Raft.RetryInterval)
		select {
		case <-ctx.Done():
			return
		case <-time.After(f.cfg.Raft.RetryInterval):
		}
	}
}

// raftRetryLevel is the level of the repeats-th failure in a row of one kind: a peer that
// keeps failing is logged once at WARN, then at DEBUG. A peer that does not know this node
// yet (its gossip has not seen it: every start of a region) is INFO the first time and WARN
// only if it still refuses after a retry.
func raftRetryLevel(err error, repeats int) slog.Level {
	var we *wire.Error
	unknown := errors.As(err, &we) && we.Code == wire.CodeForbidden
	switch {
	case unknown && repeats == 1:
		return slog.LevelInfo
	case repeats == 1, unknown && repeats == 2:
		return slog.LevelWarn
	}
	return slog.LevelDebug
}

// writeRaft opens one raft stream and writes c's queue to it until the stream, the
// connection or ctx ends.
func (f *Federation) writeRaft(ctx context.Context, l *link, conn *quic.Conn, class byte, c *raftClass) error {
	str, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return err
	}
	if class == wire.RaftControl {
		str.SetPriority(raftControlUrgency, false)
	} else {
		str.SetPriority(raftBulkUrgency, true)
	}
	stop := context.AfterFunc(ctx, func() { str.CancelWrite(wire.AppCancelled) })
	defer stop()
	// The peer sends nothing on a raft stream but an ERROR that refuses it; reading also
	// notices the stream's end.
	ended := make(chan error, 1)
	go func() {
		fr, err := wire.NewReader(str, wire.Limits{}).Read()
		if e, ok := fr.(*wire.ErrorFrame); ok {
			err = e.AsError()
		} else if err == nil {
			err = fmt.Errorf("unexpected %s on a raft stream", fr.Type())
		}
		ended <- err
	}()
	defer func() {
		str.CancelRead(wire.AppCancelled)
		str.CancelWrite(wire.AppCancelled)
		<-ended
	}()

	w := wire.NewWriter(str)
	from, to := f.cfg.Raft.ID, l.peer.RaftID
	w.Write(&wire.Raft{Class: class, From: from, To: to})
	if err := w.Flush(); err != nil {
		return err
	}
	c.setUp(true)
	c.opened.Add(1)
	defer c.setUp(false)
	s := newRaftSender(w, from, to, f.cfg.Raft.MaxFrame)
	// Armed after each round, stopped once it fired: an idle stream has no timer running.
	idle := time.NewTimer(raftIdleRelease)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-ended:
			ended <- err // for the deferred wait
			return fmt.Errorf("raft stream to %s: %w", l.peer.Name, err)
		case <-idle.C:
			s.release()
			continue
		case <-c.wake:
		}
		msgs, bytes, err := s.send(c.take())
		c.sentMsgs.Add(uint64(msgs))
		c.sentBytes.Add(uint64(bytes))
		if err != nil {
			return fmt.Errorf("raft stream to %s: %w", l.peer.Name, err)
		}
		idle.Reset(raftIdleRelease)
	}
}

func raftClassName(c byte) string {
	if c == wire.RaftBulk {
		return "bulk"
	}
	return "control"
}

// serveRaft serves a raft stream a peer opened on conn, whose first frame (RAFT) r has
// read (ServeStream hands it over): it decodes each RAFT_BATCH and hands its messages to Config.Raft.Deliver, until the
// stream or ctx ends. Only a node of this region may open one: authenticated by mutual TLS
// on a quicmq-peer/1 connection, linked to from here, and naming the raft IDs of both ends;
// any other is refused with ERROR forbidden. A malformed batch, or a message claiming
// another sender or receiver, ends the stream with ERROR protocol.
func (f *Federation) serveRaft(ctx context.Context, conn *quic.Conn, str *quic.Stream, r *wire.Reader, open *wire.Raft) error {
	fail := func(e *wire.Error) error {
		w := wire.NewWriter(str)
		w.Write(&wire.ErrorFrame{Code: e.Code, Message: e.Message})
		w.Flush()
		str.Close()
		str.CancelRead(wire.AppProtocol)
		return fmt.Errorf("federation: raft stream: %w", e)
	}
	peer, e := f.raftOpener(conn, open)
	if e != nil {
		return fail(e)
	}
	if open.Class == wire.RaftFetch {
		return f.serveFetch(ctx, str, r, fail) // raftfetch.go
	}
	c := &f.raft.peer(peer, true).class[open.Class]
	c.serving.Add(1)
	defer c.serving.Add(-1)
	stop := context.AfterFunc(ctx, func() { str.CancelRead(wire.AppCancelled) })
	defer stop()
	rr := wire.NewReader(r.Bytes(), wire.Limits{MaxFrame: f.cfg.Raft.MaxFrame})
	// readRaftStream decodes each batch into messages of their own before the next Read.
	rr.ReuseRaftBodies(raftReuseBody)
	if e := readRaftStream(rr, open, c, f.cfg.Raft.Deliver); e != nil {
		return fail(e)
	}
	str.Close()
	return nil
}

// raftReuseBody is the largest RAFT_BATCH body a raft stream's reader reads into the
// buffer it keeps (wire.Reader.ReuseRaftBodies): what a sender puts in one frame
// (raftBatchBytes); a single larger message gets a body of its own.
const raftReuseBody = raftBatchBytes

// readRaftStream reads RAFT_BATCH frames until the stream ends (nil: the sender's end of
// the stream or of its connection) or breaks the protocol (the ERROR to answer), handing
// each batch to deliver.
func readRaftStream(rr *wire.Reader, open *wire.Raft, c *raftClass, deliver func([]replica.Message)) *wire.Error {
	for {
		fr, err := rr.Read()
		if err != nil {
			if errors.Is(err, wire.ErrMalformed) || errors.Is(err, wire.ErrFrameTooLarge) {
				return wire.Errorf(wire.CodeProtocol, "%v", err)
			}
			return nil
		}
		b, ok := fr.(*wire.RaftBatch)
		if !ok {
			return wire.Errorf(wire.CodeProtocol, "unexpected %s on a raft stream", fr.Type())
		}
		msgs, err := decodeRaftBatch(b.Batch, open.From, open.To)
		if err != nil {
			return wire.Errorf(wire.CodeProtocol, "%v", err)
		}
		c.recvMsgs.Add(uint64(len(msgs)))
		c.recvBytes.Add(uint64(len(b.Batch)))
		deliver(msgs)
	}
}

// raftOpener names the peer that opened a raft stream, or says why it may not.
func (f *Federation) raftOpener(conn *quic.Conn, open *wire.Raft) (string, *wire.Error) {
	if f.cfg.Raft.ID == 0 {
		return "", wire.Errorf(wire.CodeForbidden, "the raft transport is off on node %q", f.cfg.Name)
	}
	if open.Class != wire.RaftControl && open.Class != wire.RaftBulk && open.Class != wire.RaftFetch {
		return "", wire.Errorf(wire.CodeProtocol, "unknown raft stream class %d", open.Class)
	}
	tlsState := conn.ConnectionState().TLS
	if tlsState.NegotiatedProtocol != wire.PeerALPN || len(tlsState.PeerCertificates) == 0 {
		return "", wire.Errorf(wire.CodeForbidden, "raft streams are for node-to-node links (%s, mutual TLS)", wire.PeerALPN)
	}
	name := tlsState.PeerCertificates[0].Subject.CommonName
	f.mu.Lock()
	l := f.mu.links[name]
	f.mu.Unlock()
	switch {
	case l == nil:
		return "", wire.Errorf(wire.CodeForbidden, "node %q is not a known peer of node %q", name, f.cfg.Name)
	case l.peer.Region != f.cfg.Region:
		return "", wire.Errorf(wire.CodeForbidden, "node %q is in region %q: only nodes of region %q exchange raft messages here", name, l.peer.Region, f.cfg.Region)
	case open.To != f.cfg.Raft.ID:
		return "", wire.Errorf(wire.CodeForbidden, "raft stream for raft node %d, but node %q is raft node %d", open.To, f.cfg.Name, f.cfg.Raft.ID)
	case open.From != l.peer.RaftID:
		return "", wire.Errorf(wire.CodeForbidden, "node %q opened a raft stream as raft node %d, but its raft ID is %d here", name, open.From, l.peer.RaftID)
	}
	return name, nil
}

// decodeRaftBatch decodes one RAFT_BATCH body of the stream opened by raft node from for
// raft node to, refusing a message that names any other sender or receiver.
func decodeRaftBatch(b []byte, from, to uint64) ([]replica.Message, error) {
	bf, bt, msgs, err := replica.DecodeBatch(b)
	if err != nil {
		return nil, err
	}
	if bf != from || bt != to {
		return nil, fmt.Errorf("batch from raft node %d to %d on the stream from %d to %d", bf, bt, from, to)
	}
	for _, m := range msgs {
		if m.Raft.GetFrom() != from || m.Raft.GetTo() != to {
			return nil, fmt.Errorf("message of group %d from raft node %d to %d on the stream from %d to %d",
				m.Group, m.Raft.GetFrom(), m.Raft.GetTo(), from, to)
		}
	}
	return msgs, nil
}
