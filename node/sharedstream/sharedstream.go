package sharedstream

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/subscriptions"
)

// Session is what a shared stream needs of the session it is served on: its
// subscriptions are authorized, counted, made, tracked and served exactly as one on a
// stream of its own.
type Session interface {
	// Subscribe authorizes req (the tenant's namespace, subscribe grants), counts it
	// against the connection's limit and makes the subscription with out as its stream.
	// On an error nothing is left counted.
	Subscribe(ctx context.Context, req *wire.Subscribe, out subscriptions.Stream) (*subscriptions.Subscription, *wire.Error)
	// Serve runs sub on the calling goroutine until it ends (a drain ends it), then
	// takes it off the connection's count.
	Serve(sub *subscriptions.Subscription)
}

// Region marks a SUBSCRIBE that opens a shared stream (bench/sharedstream sends the same
// constant).
const Region = "~shared-stream"

// IndexBits is where the subscription number sits in a shared stream's topic index.
const IndexBits = 32

// errSharedEnded is the write error of a subscription whose shared stream has ended.
var errSharedEnded = errors.New("sharedstream: the shared stream has ended")

// endWriteTimeout bounds a write once the stream is ending.
const endWriteTimeout = subscriptions.EndWriteTimeout

// Stream is one shared stream. The session's stream goroutine is its reader (SUBSCRIBE
// and ACK frames, and so the ack reader of every subscription on it); each subscription has
// its run and writer goroutines, as on a stream of its own; wmu serialises their writes.
type Stream struct {
	s      Session
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
	ss *Stream
	no uint64
}

func (p sharedPart) Write(b []byte) error         { return p.ss.write(b) }
func (p sharedPart) Index(n uint64) uint64        { return p.no<<IndexBits | n }
func (p sharedPart) SetWriteDeadline(t time.Time) { p.ss.str.SetWriteDeadline(t) }
func (p sharedPart) StopReading()                 {} // the stream's reader serves the others
func (p sharedPart) Finish(e *wire.Error) {
	if e != nil {
		p.ss.End(e) // one subscription's ERROR ends them all: there is no frame to end one
	}
}

// New makes the shared stream str of session s, read through r; its subscriptions'
// contexts are children of parent. Nothing runs until Serve.
func New(s Session, parent context.Context, str *quic.Stream, r *wire.Reader) *Stream {
	ctx, cancel := context.WithCancel(parent)
	return &Stream{s: s, str: str, r: r, ctx: ctx, cancel: cancel}
}

// Serve serves the stream, whose first frame is first, until the client ends it or an
// error does, and waits for its subscriptions. It returns the error that ended the stream
// (nil for the client's FIN), for the caller to count, and whether a drain ended it (the
// error is then CodeShuttingDown); the caller then ends the stream with End.
func (ss *Stream) Serve(first *wire.Subscribe) (e *wire.Error, drained bool) {
	e = ss.read(first)
	// The client's FIN (or an error) ends every subscription on the stream; each writes its
	// last batch, then the stream ends with the node's FIN, or the ERROR (End).
	ss.cancel()
	ss.wg.Wait()
	if ss.draining.Load() {
		return wire.Errorf(wire.CodeShuttingDown, "node shutting down"), true
	}
	return e, false
}

// Drain ends the stream's subscriptions, each with its last batch, and stops the reader.
// Any goroutine.
func (ss *Stream) Drain() {
	ss.draining.Store(true)
	ss.cancel()
	ss.str.SetWriteDeadline(time.Now().Add(endWriteTimeout))
	ss.str.CancelRead(wire.AppCancelled) // the reader returns; the subscriptions drain themselves
}

// write writes one subscription's batch, whole.
func (ss *Stream) write(b []byte) error {
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	if ss.ended {
		return errSharedEnded
	}
	_, err := ss.str.Write(b)
	return err
}

// End ends the stream once: ERROR e (if not nil) and FIN, and stops its reader and every
// subscription on it. Any goroutine; also a subscription's ERROR (sharedPart.Finish).
func (ss *Stream) End(e *wire.Error) {
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
func (ss *Stream) read(f wire.Frame) *wire.Error {
	for {
		switch f := f.(type) {
		case *wire.Subscribe:
			if e := ss.add(f); e != nil {
				return e
			}
		case *wire.Ack:
			no := f.Index >> IndexBits
			if no >= uint64(len(ss.subs)) {
				return wire.Errorf(wire.CodeInvalidArgument, "ACK of topic index %d offset %d: no such record was delivered on this stream", f.Index, f.Offset)
			}
			if e := ss.subs[no].TakeAck(f.Index&(1<<IndexBits-1), f.Index, f.Offset); e != nil {
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

func (ss *Stream) storeAcks() *wire.Error {
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
func (ss *Stream) add(req *wire.Subscribe) *wire.Error {
	s := ss.s
	if req.Region != "" && req.Region != Region {
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
	sub, e := s.Subscribe(ss.ctx, &r, sharedPart{ss: ss, no: uint64(len(ss.subs))})
	if e != nil {
		return e
	}
	ss.subs = append(ss.subs, sub)
	ss.wg.Add(1)
	go func() {
		defer ss.wg.Done()
		s.Serve(sub)
	}()
	select {
	case <-sub.SetUp():
	case <-ss.ctx.Done():
	}
	return nil
}
