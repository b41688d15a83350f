package node

// The shared-stream ablation: a measurement aid, off by default (Config.AblationSharedStream).
//
// QuicMQ's claim is that one QUIC stream per subscription keeps a lossy or slow subscription
// from stalling the others on the same connection. To measure that claim against the same
// node, client, transport and code paths, this mode carries all of a connection's
// subscriptions on ONE stream, as a TCP broker carries them on one socket. Everything else
// stays: records are read from the log with the same ReadFunc, at most ReadAhead bytes per
// topic per round, encoded as the same RECORD frames and written by one goroutine per
// stream. What changes is only the stream mapping, so that:
//   - a lost packet holds up the delivery of every later byte of the stream, whichever
//     subscription those bytes belong to (transport head-of-line blocking), and
//   - a subscription the application stops reading fills the stream's flow-control window
//     (the client stops reading the shared stream once that subscription's small queue is
//     full) and so stops every other subscription on it, as a full TCP socket would.
//
// Protocol (docs/protocol.md, "Shared-stream ablation"): the client opens one stream whose
// first frame is a SUBSCRIBE with region "~shared-stream" (never a region name: regions
// match [A-Za-z0-9_-]). Further SUBSCRIBE frames on the same stream (region empty or the
// same marker) add subscriptions, numbered 0, 1, 2, ... in the order sent; each is answered
// by SUBSCRIBED in that order. TOPIC, RECORD, GAP and ACK use the index
// subscription<<32 | topic, so the client routes frames by index>>32. Subscriptions on the
// stream end together when the stream ends; durable consumers and region replays are not
// supported there (refused with ERROR, which ends the stream).

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/routing"
	"github.com/quicmq/quicmq/wal"
)

// ablationSharedRegion marks a SUBSCRIBE that opens a shared stream (client/ablation.go
// sends the same constant).
const ablationSharedRegion = "~shared-stream"

// sharedIndexBits is where the subscription number sits in a shared stream's topic index.
const sharedIndexBits = 32

// sharedStream serves one shared stream. Its run goroutine owns the subscriptions and
// cursors and is the only writer of the stream; its reader goroutine is the only reader
// (SUBSCRIBE and ACK frames) and hands new subscriptions over through mu.
type sharedStream struct {
	s      *session
	str    *quic.Stream
	r      *wire.Reader
	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{} // a topic advanced or a SUBSCRIBE arrived
	born   chan struct{} // a topic appeared

	draining atomic.Bool
	readErr  atomic.Pointer[wire.Error] // a protocol error found by the reader goroutine
	opened   atomic.Int64               // subscriptions counted in s.subs and the gauge

	batch bool // the client takes RECORDS frames, as on a stream per subscription

	// Owned by the run goroutine.
	subs []*sharedSub
	w    *wire.Writer
	rec  wire.Record // the frame being written, reused

	mu struct {
		sync.Mutex
		pending   []*wire.Subscribe // SUBSCRIBE frames not yet set up, in order
		delivered map[uint64]uint64 // topic index -> offset after the last record sent
	}
}

type sharedSub struct {
	no      uint64
	pattern string
	start   wire.StartKind
	value   uint64
	cursors []*cursor
	byTopic map[string]*cursor
}

// serveShared serves a shared stream whose first frame is first, if the node allows it.
func (s *session) serveShared(str *quic.Stream, r *wire.Reader, first *wire.Subscribe) {
	if !s.n.cfg.AblationSharedStream {
		s.failStream(str, wire.Errorf(wire.CodeForbidden, "the shared-stream ablation is off on this node (a measurement aid: Config.AblationSharedStream, --ablation-shared-stream)"))
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	ss := &sharedStream{
		s: s, str: str, r: r, ctx: ctx, cancel: cancel,
		wake: make(chan struct{}, 1),
		born: make(chan struct{}, 1),
		w:    wire.NewWriter(str),
	}
	ss.mu.delivered = make(map[uint64]uint64)
	if e := ss.checkSubscribe(first); e != nil {
		s.failStream(str, e)
		return
	}
	if !s.track(ss) {
		s.failStream(str, wire.Errorf(wire.CodeShuttingDown, "node shutting down"))
		return
	}
	defer s.untrack(ss)
	ss.batch = first.Flags&wire.SubscribeRecords != 0
	ss.mu.pending = []*wire.Subscribe{first}
	defer func() {
		n := ss.opened.Load()
		s.subs.Add(-n)
		s.n.metrics.subscriptions.Sub(float64(n))
	}()

	err := ss.run()
	if ss.draining.Load() {
		err = wire.Errorf(wire.CodeShuttingDown, "node shutting down")
	}
	if err != nil {
		s.n.metrics.subscribeErrors.WithLabelValues(strconv.FormatUint(uint64(err.Code), 10)).Inc()
	}
	ss.end(err)
}

func (ss *sharedStream) drain() {
	ss.draining.Store(true)
	ss.cancel()
	ss.str.SetWriteDeadline(time.Now().Add(time.Second))
}

// end closes the stream, first sending e if not nil.
func (ss *sharedStream) end(e *wire.Error) {
	ss.str.CancelRead(wire.AppCancelled)
	if e != nil {
		ss.str.SetWriteDeadline(time.Now().Add(time.Second))
		ss.w.Write(&wire.ErrorFrame{Code: e.Code, Message: e.Message})
		ss.w.Flush()
	}
	ss.str.Close()
}

// checkSubscribe refuses what a shared stream does not carry.
func (ss *sharedStream) checkSubscribe(req *wire.Subscribe) *wire.Error {
	if err := routing.ValidatePattern(req.Pattern); err != nil {
		return &wire.Error{Code: wire.CodeInvalidTopic, Message: err.Error()}
	}
	if req.Durable != "" || (req.Region != "" && req.Region != ablationSharedRegion) {
		return wire.Errorf(wire.CodeInvalidArgument, "a shared stream (ablation) carries neither durable consumers nor region replays")
	}
	if req.Start == wire.StartTime {
		return wire.Errorf(wire.CodeInvalidArgument, "a shared stream (ablation) starts at earliest, latest or an offset")
	}
	return nil
}

// run streams records of every subscription on the stream until the client ends it, the
// connection ends or the node drains. It returns an error to send, or nil.
func (ss *sharedStream) run() *wire.Error {
	n := ss.s.n
	cancelTopics := n.wal.NotifyNewTopics(ss.born)
	defer cancelTopics()
	defer func() {
		for _, sub := range ss.subs {
			for _, c := range sub.cursors {
				c.cancel()
			}
		}
	}()
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		defer ss.cancel()
		if e := ss.readFrames(); e != nil {
			ss.readErr.Store(e)
		}
	}()
	defer func() { <-readDone }()
	defer ss.str.CancelRead(wire.AppCancelled)

	for {
		if e := ss.takeSubscribes(); e != nil {
			return e
		}
		sent, err := ss.sendAvailable()
		if e := ss.readErr.Load(); e != nil {
			return e
		}
		if err != nil || ss.ctx.Err() != nil {
			return err
		}
		if sent > 0 {
			if ss.w.Flush() != nil {
				return nil
			}
			continue
		}
		select {
		case <-ss.ctx.Done():
			return ss.readErr.Load()
		case <-ss.wake:
		case <-ss.born:
			ss.addNewTopics()
		}
	}
}

// takeSubscribes sets up the subscriptions the reader handed over and answers SUBSCRIBED
// for each, in the order they were sent.
func (ss *sharedStream) takeSubscribes() *wire.Error {
	ss.mu.Lock()
	reqs := ss.mu.pending
	ss.mu.pending = nil
	ss.mu.Unlock()
	if len(reqs) == 0 {
		return nil
	}
	n := ss.s.n
	for _, req := range reqs {
		if got := ss.s.subs.Add(1); got > int64(n.cfg.MaxSubscriptionsPerConn) {
			ss.s.subs.Add(-1)
			return wire.Errorf(wire.CodeLimit, "%d subscriptions open on this connection, the limit is %d", got-1, n.cfg.MaxSubscriptionsPerConn)
		}
		ss.opened.Add(1)
		n.metrics.subscriptions.Inc()
		sub := &sharedSub{
			no: uint64(len(ss.subs)), pattern: req.Pattern, start: req.Start, value: req.StartValue,
			byTopic: make(map[string]*cursor),
		}
		ss.subs = append(ss.subs, sub)
		for _, t := range n.wal.Topics() {
			if routing.Match(sub.pattern, t.Name) {
				ss.addCursor(sub, t, false)
			}
		}
		ss.w.Buffer(&wire.Subscribed{})
	}
	if ss.w.Flush() != nil {
		ss.cancel()
	}
	return nil
}

// addNewTopics starts cursors on topics that appeared since the subscriptions were set up
// (read from their start, as on a stream of its own).
func (ss *sharedStream) addNewTopics() {
	var topics []wal.TopicInfo
	for _, sub := range ss.subs {
		if topics == nil {
			topics = ss.s.n.wal.Topics()
		}
		for _, t := range topics {
			if _, ok := sub.byTopic[t.Name]; !ok && routing.Match(sub.pattern, t.Name) {
				ss.addCursor(sub, t, true)
			}
		}
	}
}

func (ss *sharedStream) addCursor(sub *sharedSub, t wal.TopicInfo, created bool) {
	c := &cursor{topic: t.Name, index: sub.no<<sharedIndexBits | uint64(len(sub.cursors))}
	c.cancel = ss.s.n.wal.Notify(t.Name, ss.wake)
	first, next, _ := ss.s.n.wal.Bounds(t.Name)
	switch {
	case created || sub.start == wire.StartEarliest:
		c.next = first
	case sub.start == wire.StartLatest:
		c.next = t.Next
	case sub.start == wire.StartOffset:
		c.next = min(max(sub.value, first), next)
	}
	sub.byTopic[t.Name] = c
	sub.cursors = append(sub.cursors, c)
}

// sendAvailable is subscription.sendAvailable over every cursor of every subscription: each
// cursor's batch (at most ReadAhead bytes) is written before the next is read.
func (ss *sharedStream) sendAvailable() (int, *wire.Error) {
	n := ss.s.n
	sent := 0
	for _, sub := range ss.subs {
		for _, c := range sub.cursors {
			got, err := n.wal.ReadFunc(c.topic, c.next, 1024, n.cfg.ReadAhead, func(rec *wal.Record) error {
				ss.bind(c)
				ss.rec = recordFrame(c.index, rec, n.cfg.Region)
				if ss.batch {
					ss.w.BufferRecord(&ss.rec)
				} else {
					ss.w.Buffer(&ss.rec)
				}
				c.next = rec.Offset + 1
				return nil
			})
			if got > 0 {
				ss.mu.Lock()
				ss.mu.delivered[c.index] = c.next
				ss.mu.Unlock()
				sent += got
				if ss.w.Flush() != nil {
					return sent, nil
				}
			}
			var oor *wal.OffsetOutOfRangeError
			switch {
			case err == nil, errors.Is(err, wal.ErrUnknownTopic):
			case errors.As(err, &oor):
				ss.bind(c)
				ss.w.Write(&wire.Gap{Index: c.index, From: c.next, To: oor.First})
				c.next = oor.First
				sent++
			case errors.Is(err, wal.ErrClosed):
				return sent, wire.Errorf(wire.CodeShuttingDown, "node shutting down")
			default:
				return sent, wire.Errorf(wire.CodeInternal, "read %q at offset %d: %v", c.topic, c.next, err)
			}
		}
	}
	return sent, nil
}

// bind buffers the TOPIC frame for c before its first record or gap.
func (ss *sharedStream) bind(c *cursor) {
	if c.bound {
		return
	}
	c.bound = true
	ss.mu.Lock()
	if _, ok := ss.mu.delivered[c.index]; !ok {
		ss.mu.delivered[c.index] = c.next
	}
	ss.mu.Unlock()
	ss.w.Buffer(&wire.Topic{Index: c.index, Name: c.topic})
}

// readFrames is the reader goroutine: SUBSCRIBE frames add subscriptions (handed to the run
// goroutine), ACK frames are checked against what was sent and counted. It returns when the
// client closes or resets its side.
func (ss *sharedStream) readFrames() *wire.Error {
	for {
		f, err := ss.r.Read()
		switch {
		case errors.Is(err, wire.ErrMalformed), errors.Is(err, wire.ErrFrameTooLarge), errors.Is(err, io.ErrUnexpectedEOF):
			return &wire.Error{Code: wire.CodeProtocol, Message: err.Error()}
		case err != nil:
			return nil
		}
		switch f := f.(type) {
		case *wire.Subscribe:
			if e := ss.checkSubscribe(f); e != nil {
				return e
			}
			ss.mu.Lock()
			ss.mu.pending = append(ss.mu.pending, f)
			ss.mu.Unlock()
			select {
			case ss.wake <- struct{}{}:
			default:
			}
		case *wire.Ack:
			ss.mu.Lock()
			d, ok := ss.mu.delivered[f.Index]
			ss.mu.Unlock()
			if !ok || f.Offset >= d {
				return wire.Errorf(wire.CodeInvalidArgument, "ACK of topic index %d offset %d: no such record was delivered on this stream", f.Index, f.Offset)
			}
		default:
			return wire.Errorf(wire.CodeProtocol, "unexpected %s on a shared stream: only SUBSCRIBE and ACK", f.Type())
		}
	}
}
