package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
)

// Header is one record header: a string key and a byte value.
type Header struct {
	Key   string
	Value []byte
}

// Message is a record to publish.
type Message struct {
	Topic   string // dot-separated tokens of [A-Za-z0-9_-]+, at most 255 bytes; no wildcards
	Payload []byte // at most the node's max payload (1 MiB by default)
	Headers []Header
	// ProducerID and Sequence are stored with the record. With both set (Sequence > 0), the
	// node stores a (topic, ProducerID, Sequence) once: publishing the same Message again
	// after an unknown outcome (a lost connection) is answered with the stored record's
	// offset and Ack.Duplicate. Options.Idempotent fills them in for Messages without a
	// ProducerID.
	ProducerID string
	Sequence   uint64
}

// Ack is the node's answer to a successful publish: the record is durable (fsynced) at
// Offset of Topic's log, with the timestamp the node gave it.
type Ack struct {
	Topic  string
	Offset uint64
	Time   time.Time
	// Duplicate: the node had already stored this topic, producer and sequence (an earlier
	// attempt of this publish, e.g. one resent after a lost connection): nothing was stored
	// again, and Offset and Time are the stored record's.
	Duplicate bool
}

// Future is the pending result of PublishAsync.
type Future struct {
	done chan struct{}
	ack  Ack   // set before done is closed
	err  error // set before done is closed
	c    *Conn

	topic string
	// producer and sequence are the publish's de-duplication key (Sequence 0: none).
	producer string
	sequence uint64
	// seq is set when the writer takes the future (under the publisher's mutex), and read by
	// the reader goroutine under the same mutex.
	seq   uint64
	frame wire.Publish // owned by the writer goroutine once queued
	epoch *flushEpoch  // the Flush epoch the publish counts in until it is answered
}

// publishOp names a publish in errors: `publish to "orders"`.
func publishOp(topic string) string { return fmt.Sprintf("publish to %q", topic) }

// Done is closed when the result is known.
func (f *Future) Done() <-chan struct{} { return f.done }

// Wait waits for the result: the Ack once the record is durable, or why it is not (an
// *Error from the node, ErrClosed, a lost connection). A ctx that ends first returns ctx's
// error (wrapped with the publish: errors.Is(err, context.DeadlineExceeded)) and leaves the
// publish in flight.
func (f *Future) Wait(ctx context.Context) (Ack, error) {
	select {
	case <-f.done:
		return f.ack, f.err
	default:
	}
	select {
	case <-f.done:
		return f.ack, f.err
	case <-ctx.Done():
		return Ack{}, wrap(publishOp(f.topic), ctx.Err())
	}
}

// takeSlot waits for a slot of the pipelining window. With p, waiting also ends when p's
// stream fails, with its failure.
func (c *Conn) takeSlot(ctx context.Context, topic string, p *publisher) error {
	var dead <-chan struct{} // nil: never ready
	if p != nil {
		dead = p.dead
	}
	select {
	case c.window <- struct{}{}:
		return nil
	case <-ctx.Done():
		return wrap(publishOp(topic), ctx.Err())
	case <-c.closing:
		return wrap(publishOp(topic), ErrClosed)
	case <-dead:
		return wrap(publishOp(topic), p.failure())
	}
}

// complete resolves the future and frees its slot of the window. Exactly one owner calls it:
// PublishAsync's caller never sees an unqueued future, and a queued one is resolved either by
// the reader (in order) or by fail.
func (f *Future) complete(a Ack, err error) {
	f.ack, f.err = a, err
	close(f.done)
	<-f.c.window
	f.epoch.release()
}

// abandon gives back the slot and the Flush count of a future PublishAsync did not queue
// (its caller gets an error instead).
func (f *Future) abandon() {
	<-f.c.window
	f.epoch.release()
}

// Publish publishes m and waits until the node acknowledged it as durable. For throughput,
// use PublishAsync and wait for many Futures at once.
func (c *Conn) Publish(ctx context.Context, m Message) (Ack, error) {
	f, err := c.PublishAsync(ctx, m)
	if err != nil {
		return Ack{}, err
	}
	return f.Wait(ctx)
}

// PublishAsync sends m without waiting for the acknowledgement; the Future resolves when it
// arrives. Publishes of one Conn travel on one stream, so records to one topic are appended
// in the order of PublishAsync calls (calls that do not overlap in time). A node of protocol
// version 4 or later answers each publish once it is durable, so Futures of different topics
// may resolve in any order (one topic's stalled group holds back no other); a topic's own
// acknowledgements still come in the order of its records. It blocks only while
// MaxPendingPublishes publishes are unanswered; ctx bounds that wait.
//
// m.Payload and m.Headers must not be modified until the Future is done. Limits the node
// announced are checked first: a payload over them fails at once with CodeTooLarge.
func (c *Conn) PublishAsync(ctx context.Context, m Message) (*Future, error) {
	if err := c.checkMessage(&m); err != nil {
		return nil, wrap(publishOp(m.Topic), err)
	}
	if c.resend {
		return c.publishResendable(ctx, m)
	}
	p, err := c.publisher(ctx)
	if err != nil {
		return nil, wrap(publishOp(m.Topic), err)
	}
	if err := c.takeSlot(ctx, m.Topic, p); err != nil {
		return nil, err
	}
	f := c.newFuture(m)
	if p.retired.Load() {
		// The Conn moved home while this publish waited for a slot (failover.go, goHome). Its
		// Flush count was taken after goHome's last Flush sealed the old stream's publishes
		// (goHome retires the stream before that Flush, so a count taken after it sees the
		// stream retired), so the old stream may close before answering it: it goes home.
		np, err := c.publisher(ctx)
		if err != nil {
			f.abandon()
			return nil, wrap(publishOp(m.Topic), err)
		}
		p = np
	}
	if err := p.queue(f); err != nil {
		f.abandon()
		return nil, wrap(publishOp(m.Topic), err)
	}
	return f, nil
}

// newFuture makes m's future, numbering it when the Conn is idempotent.
func (c *Conn) newFuture(m Message) *Future {
	if c.opts.Idempotent && m.ProducerID == "" {
		m.ProducerID, m.Sequence = c.producer, c.lastSeq.Add(1)
	}
	return &Future{done: make(chan struct{}), c: c, topic: m.Topic, epoch: c.flush.acquire(),
		producer: m.ProducerID, sequence: m.Sequence, frame: wire.Publish{
			Topic:      m.Topic,
			ProducerID: m.ProducerID,
			Sequence:   m.Sequence,
			Headers:    toWireHeaders(m.Headers),
			Payload:    m.Payload,
		}}
}

// checkMessage refuses, before anything is sent, what the node could only answer by closing
// the publish stream (a frame over its limits would fail every publish pending on it).
func (c *Conn) checkMessage(m *Message) error {
	d := wire.DefaultLimits()
	if len(m.Payload) > c.lim.MaxPayload {
		return errorf(CodeTooLarge, "payload of %d bytes is over the node's limit of %d bytes", len(m.Payload), c.lim.MaxPayload)
	}
	if len(m.Topic) > d.MaxString {
		return errorf(CodeInvalidTopic, "topic of %d bytes is over the limit of 255 bytes", len(m.Topic))
	}
	if len(m.ProducerID) > d.MaxString {
		return errorf(CodeTooLarge, "producer id of %d bytes is over the limit of %d bytes", len(m.ProducerID), d.MaxString)
	}
	if len(m.Headers) > d.MaxHeaders {
		return errorf(CodeTooLarge, "%d headers are over the limit of %d", len(m.Headers), d.MaxHeaders)
	}
	size, hdrBytes := 5+6*10+len(m.Topic)+len(m.ProducerID)+len(m.Payload), 0
	for _, h := range m.Headers {
		hdrBytes += len(h.Key) + len(h.Value)
		size += 20 + len(h.Key) + len(h.Value)
	}
	if hdrBytes > d.MaxHeaderBytes {
		return errorf(CodeTooLarge, "headers of %d bytes are over the limit of %d bytes", hdrBytes, d.MaxHeaderBytes)
	}
	if size > c.lim.MaxFrame {
		return errorf(CodeTooLarge, "frame of up to %d bytes is over the node's limit of %d bytes", size, c.lim.MaxFrame)
	}
	return nil
}

func toWireHeaders(hs []Header) []wire.Header {
	if len(hs) == 0 {
		return nil
	}
	out := make([]wire.Header, len(hs))
	for i, h := range hs {
		out[i] = wire.Header{Key: h.Key, Value: h.Value}
	}
	return out
}

// publisher returns the Conn's publish stream, opening it on first use or after the previous
// one failed.
func (c *Conn) publisher(ctx context.Context) (*publisher, error) {
	if p := c.currentPublisher(); p != nil {
		return p, nil
	}
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	if p := c.currentPublisher(); p != nil {
		return p, nil
	}
	if c.resending() {
		return nil, nil // the resender makes the next stream
	}
	s, l, err := c.openStreamOn(ctx)
	if err != nil {
		return nil, err
	}
	p := c.newPublisher(s, l)
	// A resend that began meanwhile goes first: this stream is not used.
	c.rs.Lock()
	defer c.rs.Unlock()
	if c.rs.active {
		s.CancelWrite(wire.AppCancelled)
		s.CancelRead(wire.AppCancelled)
		return nil, nil
	}
	if err := c.install(p); err != nil {
		return nil, err
	}
	return p, nil
}

func (c *Conn) newPublisher(s *quic.Stream, l *link) *publisher {
	return &publisher{c: c, s: s, l: l, kick: make(chan struct{}, 1), dead: make(chan struct{}), writerDone: make(chan struct{})}
}

// install makes p the Conn's publish stream and starts its goroutines. Called with pubMu
// held (and rs, when a resend may be under way).
func (c *Conn) install(p *publisher) error {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		p.s.CancelWrite(wire.AppCancelled)
		p.s.CancelRead(wire.AppCancelled)
		return ErrClosed
	}
	c.mu.pub = p
	c.wg.Add(2)
	c.mu.Unlock()
	go p.writeLoop()
	go p.readLoop()
	return nil
}

// currentPublisher returns the publish stream if it has not failed. It does not hold c.mu
// while it asks the stream (p.mu is taken before c.rs, which is taken before c.mu).
func (c *Conn) currentPublisher() *publisher {
	c.mu.Lock()
	p := c.mu.pub
	c.mu.Unlock()
	if p != nil && p.failure() == nil && !p.retired.Load() {
		return p
	}
	return nil
}

// publisher is one publish stream. PublishAsync queues futures under the mutex and kicks the
// writer goroutine, which owns the sending side (sequence numbers, encoding, batching) and
// takes everything queued at once: no goroutine hand-off per publish. The reader goroutine
// owns the receiving side and resolves the futures in pending by seq: a node of protocol
// version 4 or later is asked (PUBLISH_OPEN) to answer each publish once it is durable, in
// any order, so that one topic group's stall holds back only that group's publishes; an
// older node answers in order. Both goroutines belong to the Conn.
type publisher struct {
	c *Conn
	s *quic.Stream
	l *link // the connection s is on
	// retired: the Conn moved to another connection while this stream worked (failover.go):
	// new publishes open a stream there, and this one answers those it took.
	retired atomic.Bool
	kick    chan struct{} // 1-buffered: the queue became non-empty
	dead    chan struct{} // closed by fail
	// writerDone is closed when writeLoop returned: from then on no goroutine of this stream
	// touches a future's frame, so a resend may encode it again.
	writerDone chan struct{}
	mu         struct {
		sync.Mutex
		queued []*Future // from PublishAsync, not yet taken by the writer, in call order
		// pending are the futures taken by the writer (sent or being encoded), in seq order
		// from pending[0], which is unanswered: pending[k] is the publish of pending[0].seq+k,
		// nil once answered (out of order). unanswered counts those not nil.
		pending    []*Future
		unanswered int
		err        error // why the stream failed; set once
		resent     bool  // its futures went to the resender (Idempotent and Reconnect)
	}
}

// queue hands f to the writer, or returns the stream's failure. A future queued before the
// stream fails is resolved by fail, like a pending one.
func (p *publisher) queue(f *Future) error {
	p.mu.Lock()
	if err := p.mu.err; err != nil {
		if p.mu.resent && p.c.joinBacklog(f) {
			err = nil // behind the futures this stream's failure handed to the resender
		}
		p.mu.Unlock()
		return err
	}
	p.mu.queued = append(p.mu.queued, f)
	first := len(p.mu.queued) == 1
	p.mu.Unlock()
	if first {
		select {
		case p.kick <- struct{}{}:
		default: // a kick is already waiting
		}
	}
	return nil
}

// take moves every queued future to pending, numbering them, and returns them; spare (its
// futures already encoded) becomes the new queue. ok is false once the stream failed.
func (p *publisher) take(seq *uint64, spare []*Future) (taken []*Future, ok bool) {
	clear(spare)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.err != nil {
		return nil, false
	}
	taken = p.mu.queued
	p.mu.queued = spare[:0]
	for _, f := range taken {
		*seq++
		f.seq, f.frame.Seq = *seq, *seq
		p.mu.pending = append(p.mu.pending, f)
	}
	p.mu.unanswered += len(taken)
	return taken, true
}

func (p *publisher) failure() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.err
}

// writeLoop sends queued publishes. It takes every publish already waiting before it flushes,
// so under load many publishes share one stream write, and consecutive publishes to one topic
// share one PUBLISH_BATCH frame, or, with a node of version 5, consecutive publishes to any
// topics one PUBLISH_MULTI frame (at most batchBody bytes; the node answers them with
// PUBLISH_ACKS); when idle each publish goes out at once.
func (p *publisher) writeLoop() {
	defer p.c.wg.Done()
	defer close(p.writerDone)
	w := wire.NewWriter(p.s)
	batchBody := min(maxBatchBody, p.c.lim.MaxFrame)
	// One timer for every linger: a new one per flush would be an allocation per write.
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	if p.l.version >= 4 {
		// Answers in any order (resolve matches them by seq); sent with the first publish.
		w.Write(&wire.PublishOpen{Flags: wire.PublishAnyOrder})
	}
	// A node of version 5 reads PUBLISH_MULTI: publishes to many topics share a frame, where
	// one taken topic by topic would make a PUBLISH_BATCH of each (issue 29).
	buffer := w.BufferPublish
	if p.l.version >= wire.MultiVersion {
		buffer = w.BufferPublishMulti
	}
	var seq uint64
	var taken []*Future
	for {
		select {
		case <-p.kick:
		case <-p.dead:
			return
		case <-p.c.closing:
			return
		}
		for {
			var ok bool
			if taken, ok = p.take(&seq, taken); !ok {
				return // fail resolved every future
			}
			for _, f := range taken {
				buffer(&f.frame, batchBody)
				if !p.c.resend {
					f.frame = wire.Publish{} // encoded: drop the references to the caller's buffers
				}
				if w.Buffered() >= maxWrite {
					if err := w.Flush(); err != nil {
						p.fail(p.c.streamErr(err))
						return
					}
				}
			}
			if len(taken) == 0 && !p.linger(w, t) {
				break
			}
		}
		if err := w.Flush(); err != nil {
			p.fail(p.c.streamErr(err))
			return
		}
	}
}

const (
	maxBatchBody = 64 << 10 // body bytes of one PUBLISH_BATCH or PUBLISH_MULTI frame
	maxWrite     = 64 << 10 // buffered bytes that are written without waiting for more
)

// linger decides whether to wait a moment for another publish before flushing. With many
// publishes unanswered the acks are coming anyway, and a fuller write lets QUIC send fewer,
// larger packets (each one costs a system call and an ack on both sides). With few pending,
// it flushes at once, so a lone publish is never delayed.
func (p *publisher) linger(w *wire.Writer, t *time.Timer) bool {
	const (
		minPending = 64
		maxBuffer  = 32 << 10
		wait       = 200 * time.Microsecond
	)
	p.mu.Lock()
	pending := p.mu.unanswered
	p.mu.Unlock()
	if pending < minPending || w.Buffered() >= maxBuffer {
		return false
	}
	t.Reset(wait) // stopped or expired: since Go 1.23 no stale tick is left in t.C
	defer t.Stop()
	select {
	case <-p.kick:
		return true
	case <-t.C:
		return false
	}
}

// readLoop matches the node's answers to pending futures until the stream fails.
func (p *publisher) readLoop() {
	defer p.c.wg.Done()
	// Decoded in place (wire.Decoder): each answer is used before the next is read, so a
	// PUBLISH_ACK costs no allocation.
	r := newFrameReader(p.s, p.c.lim)
	for {
		fr, err := r.next(context.Background())
		if err != nil {
			if err == io.EOF {
				err = errPublishEOF
			} else {
				err = p.c.streamErr(err)
			}
			p.fail(err)
			return
		}
		switch f := fr.(type) {
		case *wire.PublishAck:
			err = p.resolve(f.Seq, f.Offset, time.Unix(0, f.Time), f.Flags&wire.AckDuplicate != 0, nil)
		case *wire.PublishAcks:
			t := time.Unix(0, f.Time)
			for k := uint64(0); k < f.Count && err == nil; k++ {
				err = p.resolve(f.Seq+k, f.Offset+k, t, false, nil)
			}
		case *wire.PublishError:
			if p.c.resend && f.Code == wire.CodeShuttingDown {
				// Nothing was appended: this publish and every later one go to the next
				// connection, in order.
				err = fromWire(f.Code, f.Message)
				break
			}
			err = p.resolve(f.Seq, 0, time.Time{}, false, fromWire(f.Code, f.Message))
		case *wire.ErrorFrame:
			err = fmt.Errorf("the node ended the publish stream: %w", fromWire(f.Code, f.Message))
			if f.Code == wire.CodeUnavailable {
				err = unknownEnd{err}
			}
		default:
			err = errorf(CodeProtocol, "the node sent %s on a publish stream", f.Type())
		}
		if err != nil {
			p.fail(err)
			return
		}
	}
}

// resolve completes the pending future seq names: the oldest one on a stream answered in
// order (a connection of a version before 4), any unanswered one on a stream that asked for
// answers in any order.
func (p *publisher) resolve(seq, offset uint64, t time.Time, dup bool, perr error) error {
	p.mu.Lock()
	pend := p.mu.pending
	var f *Future
	if len(pend) > 0 && seq >= pend[0].seq && seq-pend[0].seq < uint64(len(pend)) && (seq == pend[0].seq || p.l.version >= 4) {
		f = pend[seq-pend[0].seq]
	}
	if f == nil {
		want := "none"
		if len(pend) > 0 {
			want = fmt.Sprint(pend[0].seq)
		}
		p.mu.Unlock()
		return errorf(CodeProtocol, "the node answered publish %d, expected %s", seq, want)
	}
	pend[seq-pend[0].seq] = nil
	for len(pend) > 0 && pend[0] == nil {
		pend = pend[1:]
	}
	p.mu.pending = pend
	p.mu.unanswered--
	p.mu.Unlock()
	if perr != nil {
		f.complete(Ack{}, wrap(publishOp(f.topic), perr))
	} else {
		f.complete(Ack{Topic: f.topic, Offset: offset, Time: t, Duplicate: dup}, nil)
	}
	return nil
}

// fail ends the stream: every pending future fails with err (wrapped with its topic; those
// that were sent, with an *OutcomeUnknownError), or, with Idempotent and Reconnect when the
// connection was lost, goes to the resender (resend.go). Later publishes go to a new
// stream. Called by either goroutine; the first call wins.
func (p *publisher) fail(err error) {
	p.mu.Lock()
	if p.mu.err != nil {
		p.mu.Unlock()
		return
	}
	p.mu.err = err
	if e := (*Error)(nil); errors.As(err, &e) && e.Code == CodeShuttingDown {
		// The node stopped reading this stream because it shuts down: its connection
		// goes next, and a resend goes to another node at once (live), ahead of the
		// node's ERROR on the control stream.
		p.l.goingAway.Store(true)
	}
	sent, queued := slices.DeleteFunc(p.mu.pending, func(f *Future) bool { return f == nil }), p.mu.queued
	p.mu.pending, p.mu.queued, p.mu.unanswered = nil, nil, 0
	close(p.dead)
	startResender := false
	if p.c.mayResend(err) {
		p.mu.resent = true
		startResender = p.c.handOver(p, append(sent, queued...))
		sent, queued = nil, nil
	}
	p.mu.Unlock()
	if startResender {
		p.c.startResender()
	}
	for _, f := range sent {
		f.complete(Ack{}, &OutcomeUnknownError{Topic: f.topic, ProducerID: f.producer, Sequence: f.sequence, Err: err})
	}
	for _, f := range queued {
		f.complete(Ack{}, wrap(publishOp(f.topic), err))
	}
	// Unblock the other goroutine: a writer stuck on flow control, a reader waiting for data.
	p.s.CancelWrite(wire.AppCancelled)
	p.s.CancelRead(wire.AppCancelled)
}
