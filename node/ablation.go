package node

// The shared-stream ablation: a measurement aid, off by default (Config.AblationSharedStream).
//
// QuicMQ's claim is that one QUIC stream per subscription keeps a lossy or slow subscription
// from stalling the others on the same connection. To measure that claim against the same
// node, client and transport, this mapping carries all of a connection's subscriptions on
// ONE stream, as a TCP broker carries them on one socket. It is a stream mapping (subscriptions.Stream)
// beneath the one subscription core and nothing more: each subscription on a shared stream
// is set up, authorized (authorizeSubscribe: tenant namespace and subscribe grants, the same
// errors), read from the log, batched, written by its own writer goroutine and acknowledged
// exactly as on a stream of its own. What changes is only where its frames go and how its
// topics are numbered, so that:
//   - a lost packet holds up the delivery of every later byte of the stream, whichever
//     subscription those bytes belong to (transport head-of-line blocking), and
//   - a subscription the application stops reading fills the stream's flow-control window
//     (the client stops reading the shared stream once that subscription's small queue is
//     full) and so stops every other subscription on it, as a full TCP socket would.
//
// Protocol (docs/protocol.md, appendix "Shared-stream ablation"): the client opens one stream
// whose first frame is a SUBSCRIBE with region "~shared-stream" (never a region name: regions
// match [A-Za-z0-9_-]). Further SUBSCRIBE frames on the same stream (region empty or the
// same marker) add subscriptions, numbered 0, 1, 2, ... in the order sent; each is answered
// by SUBSCRIBED in that order. TOPIC, RECORD, RECORDS, GAP and ACK use the index
// subscription<<32 | topic, so the client routes frames by index>>32; CAUGHT_UP, which has no
// index, is never sent on a shared stream.
// Subscriptions on the stream end together when the stream ends; an ERROR for any of them
// (a refused SUBSCRIBE included) ends the stream. Region replays are not carried.

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
	"github.com/quicmq/quicmq/node/subscriptions"
)

// ablationSharedRegion marks a SUBSCRIBE that opens a shared stream (bench/sharedstream
// sends the same constant).
const ablationSharedRegion = "~shared-stream"

// sharedIndexBits is where the subscription number sits in a shared stream's topic index.
const sharedIndexBits = 32

// errSharedEnded is the write error of a subscription whose shared stream has ended.
var errSharedEnded = errors.New("node: the shared stream has ended")

// sharedStream is one shared stream. The session's stream goroutine is its reader (SUBSCRIBE
// and ACK frames, and so the ack reader of every subscription on it); each subscription has
// its run and writer goroutines, as on a stream of its own; wmu serialises their writes.
type sharedStream struct {
	s      *session
	str    *quic.Stream
	r      *wire.Reader
	ctx    context.Context // parent of the subscriptions' contexts
	cancel context.CancelFunc
	wg     sync.WaitGroup // the subscriptions' run goroutines

	draining atomic.Bool
	subs     []*subscriptions.Subscription // by number; reader goroutine only

	wmu    sync.Mutex // held across a write, so batches never interleave; guards ended
	ended  bool
	ending sync.Once
}

// sharedPart is a subscription's mapping onto a shared stream.
type sharedPart struct {
	ss *sharedStream
	no uint64
}

func (p sharedPart) Write(b []byte) error         { return p.ss.write(b) }
func (p sharedPart) Index(n uint64) uint64        { return p.no<<sharedIndexBits | n }
func (p sharedPart) SetWriteDeadline(t time.Time) { p.ss.str.SetWriteDeadline(t) }
func (p sharedPart) StopReading()                 {} // the stream's reader serves the others
func (p sharedPart) Finish(e *wire.Error) {
	if e != nil {
		p.ss.end(e) // one subscription's ERROR ends them all: there is no frame to end one
	}
}

// serveShared serves a shared stream whose first frame is first, if the node allows it.
func (s *session) serveShared(str *quic.Stream, r *wire.Reader, first *wire.Subscribe) {
	n := s.n
	if !n.cfg.AblationSharedStream {
		s.failStream(str, wire.Errorf(wire.CodeForbidden, "the shared-stream ablation is off on this node (a measurement aid: Config.AblationSharedStream, --ablation-shared-stream)"))
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	ss := &sharedStream{s: s, str: str, r: r, ctx: ctx, cancel: cancel}
	if !s.track(ss) {
		s.failStream(str, wire.Errorf(wire.CodeShuttingDown, "node shutting down"))
		return
	}
	defer s.untrack(ss)
	err := ss.read(first)
	// The client's FIN (or an error) ends every subscription on the stream; each writes its
	// last batch, then the stream ends with the node's FIN, or the ERROR.
	ss.cancel()
	ss.wg.Wait()
	if ss.draining.Load() {
		err = wire.Errorf(wire.CodeShuttingDown, "node shutting down")
	} else if err != nil {
		n.metrics.subscribeErrors.WithLabelValues(strconv.FormatUint(uint64(err.Code), 10)).Inc()
	}
	ss.end(err)
}

func (ss *sharedStream) drain() {
	ss.draining.Store(true)
	ss.cancel()
	ss.str.SetWriteDeadline(time.Now().Add(endWriteTimeout))
	ss.str.CancelRead(wire.AppCancelled) // the reader returns; the subscriptions drain themselves
}

// write writes one subscription's batch, whole.
func (ss *sharedStream) write(b []byte) error {
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	if ss.ended {
		return errSharedEnded
	}
	_, err := ss.str.Write(b)
	return err
}

// end ends the stream once: ERROR e (if not nil) and FIN, and stops its reader and every
// subscription on it.
func (ss *sharedStream) end(e *wire.Error) {
	ss.ending.Do(func() {
		if e != nil {
			// A subscription's write blocked on flow control holds wmu: bound it.
			ss.str.SetWriteDeadline(time.Now().Add(endWriteTimeout))
		}
		ss.wmu.Lock()
		ss.ended = true
		if e != nil {
			ss.str.SetWriteDeadline(time.Now().Add(endWriteTimeout))
			ss.str.Write(wire.Append(nil, &wire.ErrorFrame{Code: e.Code, Message: e.Message}))
		}
		ss.str.Close()
		ss.wmu.Unlock()
		ss.str.CancelRead(wire.AppCancelled)
		ss.cancel()
	})
}

// read is the stream's reader, starting with its first frame f: SUBSCRIBE frames add
// subscriptions, ACK frames go to their subscription's takeAck, and durable positions are
// stored whenever no further frame is buffered, so that after the client's FIN every ACK
// read before it is stored. It returns when the client closes or resets its side, or with
// the error that ends the stream.
func (ss *sharedStream) read(f wire.Frame) *wire.Error {
	for {
		switch f := f.(type) {
		case *wire.Subscribe:
			if e := ss.add(f); e != nil {
				return e
			}
		case *wire.Ack:
			no := f.Index >> sharedIndexBits
			if no >= uint64(len(ss.subs)) {
				return wire.Errorf(wire.CodeInvalidArgument, "ACK of topic index %d offset %d: no such record was delivered on this stream", f.Index, f.Offset)
			}
			if e := ss.subs[no].TakeAck(f.Index&(1<<sharedIndexBits-1), f.Index, f.Offset); e != nil {
				return e
			}
		default:
			return wire.Errorf(wire.CodeProtocol, "unexpected %s on a shared stream: only SUBSCRIBE and ACK", f.Type())
		}
		if !ss.r.FrameBuffered() {
			if e := ss.storeAcks(); e != nil {
				return e
			}
		}
		var err error
		f, err = ss.r.Read()
		switch {
		case errors.Is(err, wire.ErrFrameTooLarge):
			return &wire.Error{Code: wire.CodeTooLarge, Message: err.Error()}
		case errors.Is(err, wire.ErrMalformed), errors.Is(err, io.ErrUnexpectedEOF):
			return &wire.Error{Code: wire.CodeProtocol, Message: err.Error()}
		case err != nil:
			return ss.storeAcks()
		}
	}
}

func (ss *sharedStream) storeAcks() *wire.Error {
	for _, sub := range ss.subs {
		if e := sub.StoreAcks(); e != nil {
			return e
		}
	}
	return nil
}

// add sets up one more subscription on the stream, through the same authorization, limits
// and core as a subscription on a stream of its own, and waits until its SUBSCRIBED is
// written (so the answers keep the order of the requests).
func (ss *sharedStream) add(req *wire.Subscribe) *wire.Error {
	s := ss.s
	if req.Region != "" && req.Region != ablationSharedRegion {
		return wire.Errorf(wire.CodeInvalidArgument, "a shared stream (ablation) carries no region replays: region %q", req.Region)
	}
	if req.Group != nil || req.Flags&wire.SubscribeStandby != 0 {
		return wire.Errorf(wire.CodeInvalidArgument, "a shared stream (ablation) carries no consumer group members and no standbys")
	}
	r := *req
	r.Region = ""
	// CAUGHT_UP carries no index, so a client could not tell which subscription of the
	// stream it is for: the node does not send it here (flag bit 1 is ignored).
	r.Flags &^= wire.SubscribeCaughtUp
	auth, e := s.authorizeSubscribe(&r)
	if e != nil {
		return e
	}
	if e := s.countSubscription(); e != nil {
		return e
	}
	sub, e := s.newSubscription(ss.ctx, auth, sharedPart{ss: ss, no: uint64(len(ss.subs))}, false)
	if e != nil {
		s.subs.Add(-1)
		return e
	}
	ss.subs = append(ss.subs, sub)
	ss.wg.Add(1)
	go func() {
		defer ss.wg.Done()
		defer s.subs.Add(-1)
		s.serveSubscription(sub)
	}()
	select {
	case <-sub.SetUp():
	case <-ss.ctx.Done():
	}
	return nil
}
