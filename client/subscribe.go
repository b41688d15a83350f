package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
)

// Start says where a subscription reads each matching topic from when it has no stored
// durable position for it. The zero value is Earliest.
type Start struct {
	kind  wire.StartKind
	value uint64
}

var (
	// Earliest starts at the first retained record of each topic.
	Earliest = Start{}
	// Latest delivers only records appended after the subscription was set up.
	Latest = Start{kind: wire.StartLatest}
)

// AtOffset starts at offset n of every matching topic: raised to the first retained record
// when n is below it; a topic whose head (the offset its next record gets) is below n
// refuses the subscription with CodeOffsetOutOfRange, and n equal to the head waits for the
// next record.
func AtOffset(n uint64) Start { return Start{kind: wire.StartOffset, value: n} }

// AtTime starts at the first record stamped at or after t. Times before 1970 mean Earliest.
func AtTime(t time.Time) Start {
	if t.Before(time.Unix(0, 0)) {
		return Start{kind: wire.StartTime}
	}
	return Start{kind: wire.StartTime, value: uint64(t.UnixNano())}
}

// String describes the start: "earliest", "latest", "offset 42" or "time 2025-01-02T...".
func (s Start) String() string {
	switch s.kind {
	case wire.StartOffset:
		return "offset " + strconv.FormatUint(s.value, 10)
	case wire.StartTime:
		return "time " + time.Unix(0, int64(s.value)).UTC().Format(time.RFC3339Nano)
	}
	return s.kind.String()
}

// SubscribeOptions configure a subscription.
type SubscribeOptions struct {
	// From applies to topics without a stored durable position. Default Earliest.
	From Start
	// Durable names a durable consumer. The node stores, per topic, the highest offset acked
	// under this name, and a later subscription with the same name resumes right after it.
	Durable string
	// Region, when set to another region than the node's, replays that region's log of the
	// matching topics directly over the node's link to it, without storing it locally
	// ("T in region R from offset N"). Offsets are then region R's.
	Region string
	// NotifyCaughtUp asks the node to say when the subscription has delivered every record
	// up to the head each matching topic had when it was set up (for a pattern: every topic
	// matching then). Next then returns ErrCaughtUp once, in order after those records, and
	// CaughtUp's channel closes: reading a topic to its end needs no timeout. Default false.
	NotifyCaughtUp bool
	// Position, when not nil, resumes the subscription after a portable position (from
	// Subscription.Position, of this subscription or another, in this region or another):
	// each topic it names is read from the first record it does not cover, and the records
	// after that which it covers are skipped, each origin region in order. With Durable, the
	// node raises it to cover what the durable acknowledged as the node knows it (its stored
	// position, and newer ones mirrored from other regions): it never moves a durable back.
	// Topics it does not name start as From (or a durable's stored position) says. Not with
	// Group or Region. Needs a node that knows vector positions (SUBSCRIBE flag 16); an older
	// node refuses the subscription with CodeProtocol. Default nil.
	Position Position
	// Standby, with Durable: when another subscriber holds the durable (one subscriber at a
	// time), wait and take over when it ends (Pulsar's Failover), instead of being refused
	// with CodeConflict. Subscribe then returns once this subscriber is the active one, so
	// give it a ctx that allows the wait. Default false.
	Standby bool

	// Group makes the subscription a member of the shared consumer group of that name
	// (1-255 characters of [A-Za-z0-9_.-]): the group's members split the records of the
	// pattern, each record to one member at a time; the member acknowledges each record
	// (Ack acknowledges that record only), or gives it back (Nak). A record not acknowledged
	// within the group's ack-wait, or whose member's stream ends, is delivered again to a
	// member; after max-deliver deliveries it goes to the dead-letter topic. From applies to
	// topics the group has no position in yet. Durable must be empty. The first member's
	// settings (below; zero: the node's defaults) make the group; a member asking for
	// other settings is refused with CodeConflict naming the difference.
	Group string
	// AckWait is the group's ack-wait, in whole milliseconds. 0: the group's (node default
	// 30 s).
	AckWait time.Duration
	// MaxDeliver is how often a record of the group is delivered before it goes to
	// DeadLetter. 0: the group's (node default 5).
	MaxDeliver int
	// DeadLetter is the topic records that reached MaxDeliver are written to, with the
	// DeadLetter*Header headers saying why and from where. "": they are dropped (the node
	// logs each).
	DeadLetter string
	// OrderBy keeps records of one topic, or of one key, with one member at a time, in
	// order. Default OrderNone.
	OrderBy Order
}

// ErrCaughtUp is returned once by Next (and yielded once by Records) on a subscription made
// with SubscribeOptions.NotifyCaughtUp, after the last record that was stored when the
// subscription was set up. It does not end the subscription: later records follow.
var ErrCaughtUp = errors.New("client: subscription caught up: every record stored when it was set up has been delivered")

// Record is one record delivered to a subscription.
type Record struct {
	Topic        string
	Offset       uint64    // dense per topic and region: 0, 1, 2, ...
	Time         time.Time // assigned by the topic's owner at append; never decreases in a topic
	OriginRegion string    // the region the record was first published in
	OriginOffset uint64    // its offset in that region's log
	ProducerID   string
	Sequence     uint64
	Headers      []Header
	Payload      []byte

	gen uint32 // the region generation it was delivered in (position.go); 0: the current one
}

// Subscription is one subscription: its own QUIC stream, read on the caller's goroutine.
//
// Next (and Records) must be called by one goroutine at a time. Ack and Close may be called
// from any goroutine, also while Next waits.
type Subscription struct {
	c       *Conn
	pattern string
	opts    SubscribeOptions
	begun   time.Time // when it was set up: where a resumed start=latest subscription reads from
	closed  atomic.Bool
	caught  chan struct{} // closed when the node's CAUGHT_UP arrived (NotifyCaughtUp)

	readMu sync.Mutex // held by Next, and by Close while it drains; guards the fields below
	fr     *frameReader
	topics topicIndex // stream-local index -> topic name, from TOPIC frames
	// The last topic looked up in topics: records come in runs of one topic, so most
	// records skip the map.
	lastIndex uint64
	lastTopic string
	err       error // terminal: every later Next returns it
	isCaught  bool  // caught is closed
	slab      slab  // owns the delivered payloads
	// With Options.Reconnect: per topic, the offset after the last record delivered, so that
	// a subscription made again on a new connection delivers nothing twice.
	delivered map[string]*uint64
	lastNext  *uint64 // delivered[lastTopic]: a run of one topic's records skips the map

	grp groupState // Commit, and the frames it read past (group.go)
	// resuming: the stream ended in a way that asks for the subscription to be made again,
	// and the Next that tried ran out of time; the next Next makes it again before reading.
	// readMu.
	resuming bool

	// pos is the subscription's portable position (position.go), nil for a group member;
	// region is the region of the node of its stream, which a failover changes (failover.go).
	pos    *positions
	region string
	// gm is a group member's memory of what it acknowledged, for a move (groupmove.go); nil
	// without Options.Reconnect and for other subscriptions.
	gm *groupMoves

	wmu      sync.Mutex   // guards the sending side and the fields below
	s        *quic.Stream // the subscription's stream; replaced by resubscribe (Reconnect)
	names    nameIndex
	ackBuf   []byte
	sendDone bool // FIN sent; no more writes
	// With Options.Reconnect: ACKs of topics not announced yet on the current stream (it
	// replaced a lost one), sent when their TOPIC arrives; and every topic ever announced.
	unsent map[string]uint64
	known  map[string]bool
}

// Subscribe opens a new stream for a subscription to pattern (a topic, or a pattern with
// "*" for one token and a trailing ">" for one or more) and waits until the node confirmed
// it. The node's refusal is an *Error (CodeInvalidTopic for a bad pattern). ctx bounds the
// setup only; pass a context to each Next for the records.
func (c *Conn) Subscribe(ctx context.Context, pattern string, opts SubscribeOptions) (*Subscription, error) {
	if err := checkSubscribe(pattern, opts); err != nil {
		return nil, wrap(fmt.Sprintf("subscribe %q", pattern), err)
	}
	sub := &Subscription{
		c:       c,
		pattern: pattern,
		opts:    opts,
		begun:   time.Now(),
		caught:  make(chan struct{}),
	}
	if c.opts.Reconnect && opts.Group == "" { // a group redelivers: nothing is skipped
		sub.delivered = make(map[string]*uint64)
		sub.unsent = make(map[string]uint64)
		sub.known = make(map[string]bool)
	}
	if opts.Group == "" {
		sub.pos = newPositions(opts.Durable != "", opts.Position)
	} else if c.opts.Reconnect {
		sub.gm = newGroupMoves()
	}
	str, fr, region, err := sub.open(ctx, opts.From)
	if err != nil {
		return nil, wrap(fmt.Sprintf("subscribe %q", pattern), err)
	}
	sub.s, sub.fr, sub.region = str, fr, region
	return sub, nil
}

// open opens a stream for the subscription starting at from and waits until the node
// confirmed it. On a node of another region than the subscription's stream was (a failover),
// it resumes after the position delivered so far instead (failover.go). It returns the
// node's region.
func (sub *Subscription) open(ctx context.Context, from Start) (*quic.Stream, *frameReader, string, error) {
	c := sub.c
	s, l, err := c.openStreamOn(ctx)
	if err != nil {
		return nil, nil, "", err
	}
	vector := sub.opts.Position
	switch {
	case sub.region != "" && l.region != sub.region: // a move: only the vector means the same there
		vector, from = sub.pos.snapshot(false), sub.opts.From
		if from.kind == wire.StartLatest {
			from = AtTime(sub.begun.Add(-time.Second)) // a second for the clocks of client and node
		}
	case sub.region != "" && vector != nil: // made again in its region: after what it delivered
		vector = sub.pos.snapshot(false)
	}
	block, err := vector.block()
	if err != nil {
		s.CancelWrite(wire.AppCancelled)
		s.CancelRead(wire.AppCancelled)
		return nil, nil, "", err
	}
	fr := newFrameReader(s, c.lim)
	req := &wire.Subscribe{Pattern: sub.pattern, Start: from.kind, StartValue: from.value, Durable: sub.opts.Durable, Region: sub.opts.Region, Flags: wire.SubscribeRecords, Group: groupBlock(sub.opts), Vector: block}
	if sub.opts.NotifyCaughtUp {
		req.Flags |= wire.SubscribeCaughtUp
	}
	if sub.opts.Standby {
		req.Flags |= wire.SubscribeStandby
	}
	if _, err = s.Write(wire.Append(nil, req)); err == nil {
		var f wire.Frame
		f, err = fr.next(ctx)
		fr.release() // ctx bounds the setup only; Next watches its own
		if err == nil {
			switch f := f.(type) {
			case *wire.Subscribed:
				return s, fr, l.region, nil
			case *wire.ErrorFrame:
				err = fromWire(f.Code, f.Message)
				if block != nil && f.Code == wire.CodeProtocol {
					err = fmt.Errorf("node %s does not take vector positions (SUBSCRIBE flag 16; it answered: %w)", l.node, err)
				}
			default:
				err = errorf(CodeProtocol, "the node answered SUBSCRIBE with %s", f.Type())
			}
		} else if ctx.Err() == nil {
			err = sub.readErr(err)
		}
	} else {
		err = c.ctxOr(ctx, err)
	}
	s.CancelWrite(wire.AppCancelled)
	s.CancelRead(wire.AppCancelled)
	return nil, nil, "", err
}

// resumable reports whether the subscription should be made again after err ended its
// stream: Options.Reconnect is on and err is the loss of the connection (or the node shutting
// down), not a decision of the node about this subscription.
func (s *Subscription) resumable(err error) bool {
	if !s.c.opts.Reconnect || s.closed.Load() {
		return false
	}
	var e *Error
	if errors.As(err, &e) {
		// Unavailable ends a subscription the node can no longer serve where it is and asks
		// for a new one: a durable's leader moved, a consumer group moved with its topic's
		// leader, an exclusive durable's lock was lost with the node that kept it.
		return e.Code == CodeShuttingDown || e.Code == CodeUnavailable
	}
	return isConnError(err)
}

// resume makes the subscription again (resubscribe), trying until it works, ctx ends, or
// the node refuses it for good, with the Reconnect policy's backoff (retryReconnect).
func (s *Subscription) resume(ctx context.Context) error {
	return retryReconnect(ctx, s.resubscribe)
}

// resubscribe makes the subscription again on a live connection (dialing if needed), from
// where it was: a durable consumer from its stored positions, a topic from the record after
// the last one delivered, start=latest from when the subscription was first set up; records
// already delivered are skipped by Next. Called by Next, with readMu held.
func (s *Subscription) resubscribe(ctx context.Context) error {
	from := s.opts.From
	if s.opts.Durable == "" {
		if next, ok := s.delivered[s.pattern]; ok { // a literal topic: exactly from there
			from = AtOffset(*next)
		} else if from.kind == wire.StartLatest {
			from = AtTime(s.begun.Add(-time.Second)) // a second for the clocks of client and node
		}
	}
	str, fr, region, err := s.open(ctx, from)
	if err != nil {
		return err
	}
	s.wmu.Lock()
	if s.sendDone { // closed meanwhile
		s.wmu.Unlock()
		str.CancelWrite(wire.AppCancelled)
		str.CancelRead(wire.AppCancelled)
		return ErrClosed
	}
	s.s, s.names = str, nameIndex{}
	s.gm.resumed()
	if region != s.region { // another region's offsets: nothing of the last one applies
		s.region = region
		s.pos.moved()
		s.gm.movedRegion()
		clear(s.unsent)
		clear(s.known)
		clear(s.delivered)
		s.lastNext = nil
	}
	s.wmu.Unlock()
	s.fr.release()
	s.fr, s.topics, s.lastTopic = fr, topicIndex{}, ""
	s.pos.newStream() // the new stream numbers its topics afresh
	return nil
}

// checkSubscribe refuses what would make a malformed frame (the grammar is the node's).
func checkSubscribe(pattern string, opts SubscribeOptions) error {
	max := wire.DefaultLimits().MaxString
	if len(pattern) > max {
		return errorf(CodeInvalidTopic, "pattern of %d bytes is over the limit of 255 bytes", len(pattern))
	}
	if len(opts.Durable) > max {
		return errorf(CodeInvalidArgument, "durable name of %d bytes is over the limit of %d bytes", len(opts.Durable), max)
	}
	if opts.Position != nil && (opts.Group != "" || opts.Region != "") {
		return errorf(CodeInvalidArgument, "a Position is not taken with Group or Region: groups keep their positions on the node, a replay reads another region's offsets")
	}
	return checkGroup(opts)
}

// Next returns the next record. It reads straight from the subscription's stream: while the
// caller does not call Next, the node is held back by QUIC flow control on this stream only.
//
// A record already received is returned even when ctx is done; ctx ends only a wait, and
// the subscription stays usable after it. Records the node lost to retention are reported
// once as a *GapError, after which Next continues. Any other error ends the subscription:
// ErrClosed after Close, the node's *Error, or the connection's failure. The record's
// Payload and Headers are never reused by the client.
//
// Long by design: one switch over the frames a subscription stream carries, each case a
// few lines, in the order of docs/protocol.md.
func (s *Subscription) Next(ctx context.Context) (Record, error) {
	s.readMu.Lock()
	defer s.nextDone()
	defer s.readMu.Unlock()
	if s.err != nil {
		return Record{}, s.err
	}
	if s.closed.Load() {
		return Record{}, ErrClosed
	}
	for {
		if s.resuming { // the old stream is over: what is left on it is not read
			if err := s.resume(ctx); err != nil {
				if ctx.Err() != nil {
					return Record{}, err // still resumable: the next Next tries again
				}
				return Record{}, s.end(err)
			}
			s.resuming = false
		}
		f, err := s.nextFrame(ctx)
		if err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil && err == ctxErr {
				return Record{}, err
			}
			if err = s.readErr(err); s.resumable(err) {
				if err = s.resume(ctx); err == nil {
					continue
				}
				if ctx.Err() != nil {
					s.resuming = true
					return Record{}, err // still resumable: the next Next tries again
				}
			}
			return Record{}, s.end(err)
		}
		switch f := f.(type) {
		case *wire.Record:
			rec, ok, err := s.record(f)
			if err != nil {
				return Record{}, err
			}
			if ok {
				return rec, nil
			}
		case *wire.Topic:
			s.bindTopic(f.Index, f.Name)
		case *wire.Gap:
			name, ok := s.topics.name(f.Index)
			if !ok {
				return Record{}, s.end(errorf(CodeProtocol, "GAP for topic index %d before its TOPIC", f.Index))
			}
			g := &GapError{Topic: name, From: f.From, To: f.To}
			if s.pos != nil {
				g.gen = s.pos.generation()
			}
			return Record{}, g
		case *wire.Committed:
			s.sawCommitted(f)
		case *wire.CaughtUp:
			if !s.isCaught { // a subscription made again after a lost connection says it again
				s.isCaught = true
				close(s.caught)
				return Record{}, ErrCaughtUp
			}
		case *wire.ErrorFrame:
			var err error = fromWire(f.Code, f.Message)
			if s.resumable(err) { // the node is shutting down: make it again when it is back
				if err = s.resume(ctx); err == nil {
					continue
				}
				if ctx.Err() != nil {
					// The stream's FIN may follow the ERROR: the next Next makes the
					// subscription again rather than read it as the node ending it.
					s.resuming = true
					return Record{}, err
				}
				return Record{}, s.end(err)
			}
			return Record{}, s.end(fmt.Errorf("client: subscription %q ended by the node: %w", s.pattern, err))
		default:
			return Record{}, s.end(errorf(CodeProtocol, "the node sent %s on a subscription stream", f.Type()))
		}
	}
}

// record is the Record a RECORD frame delivers, with ok false when it is not delivered: one
// delivered before the connection was lost, or one of a group acknowledged before the member
// moved (acknowledged again here). Called by Next, with readMu held.
func (s *Subscription) record(f *wire.Record) (rec Record, ok bool, err error) {
	if f.Bind != "" { // a RUNS entry binding its topic's index, as a TOPIC frame would
		s.bindTopic(f.Index, f.Bind)
	}
	name, known := s.lastTopic, s.lastIndex == f.Index && s.lastTopic != ""
	if !known {
		if name, known = s.topics.name(f.Index); !known {
			return Record{}, false, s.end(errorf(CodeProtocol, "RECORD for topic index %d before its TOPIC", f.Index))
		}
		s.lastIndex, s.lastTopic = f.Index, name
		if s.delivered != nil {
			if s.lastNext = s.delivered[name]; s.lastNext == nil {
				s.lastNext = new(uint64)
				s.delivered[name] = s.lastNext
			}
		}
	}
	if s.lastNext != nil {
		if f.Offset < *s.lastNext {
			return Record{}, false, nil // delivered before the connection was lost
		}
		*s.lastNext = f.Offset + 1
	}
	rec = Record{Topic: name, Offset: f.Offset, OriginRegion: f.OriginRegion, OriginOffset: f.OriginOffset}
	if s.pos != nil {
		s.pos.deliver(&rec, f.Index) // position.go
	}
	if s.gm != nil && s.gm.deliver(&rec) { // acknowledged before a move (groupmove.go)
		return Record{}, false, s.Ack(rec)
	}
	rec.Time = time.Unix(0, f.Time)
	rec.ProducerID, rec.Sequence = f.ProducerID, f.Sequence
	rec.Headers, rec.Payload = s.slab.headers(f.Headers), s.slab.copy(f.Payload)
	return rec, true, nil
}

// bindTopic binds the stream's topic index to name: a TOPIC frame, or the RUNS entry that
// carries the topic's first record. Called by Next, with readMu held.
func (s *Subscription) bindTopic(index uint64, name string) {
	s.topics.bind(index, name)
	if index == s.lastIndex {
		s.lastTopic = "" // rebound: look it up again
	}
	s.wmu.Lock()
	s.names.bind(name, index)
	var unsent uint64
	if s.known != nil {
		s.known[name] = true
		unsent = s.unsent[name]
		delete(s.unsent, name)
	}
	s.wmu.Unlock()
	if unsent > 0 { // acked while the topic had no index on this stream
		s.Ack(Record{Topic: name, Offset: unsent - 1})
	}
}

// Records iterates over the subscription's records, calling Next with ctx. A *GapError and
// ErrCaughtUp are yielded and the iteration goes on; any other error is yielded last.
// Breaking out of the loop leaves the subscription open.
func (s *Subscription) Records(ctx context.Context) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		for {
			r, err := s.Next(ctx)
			if err != nil {
				var gap *GapError
				if !yield(Record{}, err) || !errors.As(err, &gap) && err != ErrCaughtUp {
					return
				}
				continue
			}
			if !yield(r, nil) {
				return
			}
		}
	}
}

// CaughtUp returns a channel closed when the subscription (made with
// SubscribeOptions.NotifyCaughtUp) has delivered every record stored when it was set up; it
// closes when Next returns ErrCaughtUp. Without NotifyCaughtUp it never closes.
func (s *Subscription) CaughtUp() <-chan struct{} { return s.caught }

// end makes err the subscription's terminal error and stops receiving (Close, when closing,
// still reads to the node's FIN).
func (s *Subscription) end(err error) error {
	if !strings.HasPrefix(err.Error(), "client: ") { // a node's *Error or a stream's failure
		err = wrap(fmt.Sprintf("subscription %q", s.pattern), err)
	}
	s.err = err
	s.fr.release()
	if !s.closed.Load() {
		s.s.CancelRead(wire.AppCancelled)
	}
	return err
}

// readErr names the failure of a read from the stream.
func (s *Subscription) readErr(err error) error {
	switch {
	case s.closed.Load():
		return ErrClosed
	case errors.Is(err, io.EOF):
		return fmt.Errorf("client: subscription %q: the node ended the stream: %w", s.pattern, io.EOF)
	case errors.Is(err, wire.ErrMalformed), errors.Is(err, wire.ErrFrameTooLarge), errors.Is(err, io.ErrUnexpectedEOF):
		return errorf(CodeProtocol, "subscription %q: %v", s.pattern, err)
	}
	return s.c.streamErr(err)
}

// AckGap acknowledges the records a GAP reported deleted, and so every earlier record of
// its topic: a durable consumer whose remaining records were deleted stores a position past
// them, and is not sent the same GAP when it resumes. A group member acknowledges records one
// by one: it gets an error.
func (s *Subscription) AckGap(g *GapError) error {
	if s.gm != nil {
		return errors.New("client: ack gap: a group member acknowledges records one by one, not gaps")
	}
	if g.To == 0 {
		return nil
	}
	return s.Ack(Record{Topic: g.Topic, Offset: g.To - 1, gen: g.gen})
}

// Ack acknowledges, cumulatively, r and every earlier record of r.Topic on this
// subscription. For a durable consumer the node stores the position; for others it only
// counts it. Acking every record is correct; acking the last of a batch is cheaper.
// After a move to another region (Options.Failover), an Ack of a record delivered before the
// move is not sent (its offset is the other region's; the position there covers it already).
func (s *Subscription) Ack(r Record) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.sendDone {
		return ErrClosed
	}
	if s.pos != nil && !s.pos.ack(r.Topic, r.Offset, r.gen) {
		return nil // delivered in a region the subscription has left: its offset means nothing here
	}
	if s.gm != nil && !s.gm.ack(r) {
		return nil // the same, for a group member (groupmove.go)
	}
	idx, ok := s.names.index(r.Topic)
	if !ok && s.known[r.Topic] {
		// Announced on a lost connection, not yet on this one: sent when it is.
		s.unsent[r.Topic] = max(s.unsent[r.Topic], r.Offset+1)
		return nil
	}
	if !ok {
		return fmt.Errorf("client: ack: topic %q has no record on subscription %q", r.Topic, s.pattern)
	}
	s.ackBuf = wire.Append(s.ackBuf[:0], &wire.Ack{Index: idx, Offset: r.Offset})
	if _, err := s.s.Write(s.ackBuf); err != nil {
		if s.known != nil && isConnError(err) {
			// The connection is lost: Next makes the subscription again, and the ACK goes
			// to the new stream once the topic is announced there.
			s.unsent[r.Topic] = max(s.unsent[r.Topic], r.Offset+1)
			return nil
		}
		var se *quic.StreamError
		if s.gm != nil && (isConnError(err) || errors.As(err, &se) && se.Remote) {
			// A group member's stream is lost: the record is remembered as acknowledged
			// (groupmove.go), and its redelivery on the new stream is acknowledged there.
			return nil
		}
		if errors.As(err, &se) && se.Remote && s.known != nil {
			// The node stopped reading (it is shutting down, or ended the subscription): Next
			// makes the subscription again if it can, and the ACK goes to the new stream; if
			// it cannot, Next returns the reason.
			s.unsent[r.Topic] = max(s.unsent[r.Topic], r.Offset+1)
			return nil
		}
		if errors.As(err, &se) && se.Remote {
			// The node stopped reading: it ended the subscription, and its ERROR frame, the
			// reason, is next on the receiving side.
			return wrap(fmt.Sprintf("ack %s@%d: the node ended the subscription (Next returns its reason)", r.Topic, r.Offset), err)
		}
		return wrap(fmt.Sprintf("ack %s@%d", r.Topic, r.Offset), s.c.streamErr(err))
	}
	return nil
}

// Position returns the subscription's portable position: per topic, per origin region, the
// last origin offset it acknowledged (a durable consumer) or delivered (any other); see
// Position. Give it to SubscribeOptions.Position to resume exactly after it, in any region.
// It covers what this Subscription saw (and SubscribeOptions.Position); what a durable
// acknowledged before is held by the node, and mirrored to other regions, which add it when
// the durable resumes with a vector.
// After a move to another region (Options.Failover) a durable's position covers every record
// delivered before the move. Safe to call from any goroutine; nil for a group member.
func (s *Subscription) Position() Position {
	if s.pos == nil {
		return nil
	}
	return s.pos.snapshot(true)
}

// Close ends the subscription: it closes the sending side (FIN) and waits, at most two
// seconds, for the node to close its side. The node does that only after it has stored every
// ACK it read before the FIN, so when Close returns nil, every Ack made before it is stored
// (a durable consumer resumes after it), even if the Conn is closed right after. A Next
// waiting in another goroutine is interrupted and returns ErrClosed. Close returns an error
// when the node's end did not come (a lost connection, or the bound passed). Safe to call
// more than once.
func (s *Subscription) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	s.wmu.Lock()
	if !s.sendDone {
		s.sendDone = true
		s.s.Close()
	}
	str := s.s // after sendDone no resubscribe replaces it
	s.wmu.Unlock()
	deadline := time.Now().Add(closeDrainTimeout)
	if !s.readMu.TryLock() {
		// Next waits in another goroutine: a past deadline makes its read return (with
		// ErrClosed, as closed is set); then this goroutine reads to the node's FIN.
		str.SetReadDeadline(time.Unix(1, 0))
		locked := make(chan struct{})
		go func() { s.readMu.Lock(); close(locked) }()
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		select {
		case <-locked:
		case <-t.C: // Next is resubscribing (Reconnect): it sees sendDone and ends
			go func() { <-locked; s.fr.release(); s.readMu.Unlock() }()
			str.CancelRead(wire.AppCancelled)
			return fmt.Errorf("client: close subscription %q: the node did not end the stream within %v: ACKs sent may not be stored", s.pattern, closeDrainTimeout)
		}
	}
	defer s.readMu.Unlock()
	s.fr.release()
	live := s.err == nil || errors.Is(s.err, ErrClosed)
	str.SetReadDeadline(deadline)
	_, err := io.Copy(io.Discard, str) // records still in flight are dropped; the node's FIN ends it
	str.CancelRead(wire.AppCancelled)
	if err != nil && live {
		return fmt.Errorf("client: close subscription %q: the node did not end the stream (ACKs sent may not be stored): %w", s.pattern, s.c.streamErr(err))
	}
	return nil
}

// slab copies delivered payloads out of the frame reader's buffer (which the next frame
// overwrites) into shared chunks that are never reused, so small records cost an allocation
// per chunk instead of one per record. A record kept by the application keeps at most one
// chunk alive. Owned by the goroutine holding readMu.
type slab struct{ buf []byte }

const (
	slabChunk = 8 << 10 // bounds what one retained small record keeps alive
	slabMax   = 2 << 10 // larger values get their own allocation
)

func (s *slab) copy(b []byte) []byte {
	if len(b) == 0 {
		return []byte{}
	}
	if len(b) > slabMax {
		return append(make([]byte, 0, len(b)), b...)
	}
	if cap(s.buf)-len(s.buf) < len(b) {
		s.buf = make([]byte, 0, slabChunk)
	}
	start := len(s.buf)
	s.buf = append(s.buf, b...)
	return s.buf[start:len(s.buf):len(s.buf)]
}

func (s *slab) headers(hs []wire.Header) []Header {
	if len(hs) == 0 {
		return nil
	}
	out := make([]Header, len(hs))
	for i, h := range hs {
		out[i] = Header{Key: h.Key, Value: s.copy(h.Value)}
	}
	return out
}

// topicIndex maps a stream's topic indices to their names. A node numbers a stream's topics
// 0, 1, 2, ... in the order of their TOPIC frames (protocol.md), so they go into a slice,
// with no map entry per topic for a wildcard over many; an index out of that order (a shared
// stream's, or a rebinding) goes into a map.
type topicIndex struct {
	dense chunks[string] // dense.at(i): the name of index i
	other map[uint64]string
}

func (t *topicIndex) bind(index uint64, name string) {
	switch {
	case index < uint64(t.dense.len()):
		*t.dense.at(int(index)) = name
	case index == uint64(t.dense.len()) && t.other == nil:
		t.dense.add(name)
	default:
		if t.other == nil {
			t.other = make(map[uint64]string)
		}
		t.other[index] = name
	}
}

func (t *topicIndex) name(index uint64) (string, bool) {
	if index < uint64(t.dense.len()) {
		return *t.dense.at(int(index)), true
	}
	name, ok := t.other[index]
	return name, ok
}

// nameIndex maps a stream's topic names to their indices, for ACK and NAK frames. A TOPIC
// frame only queues its pair; the map takes them in at the first lookup after, so a
// subscription that never acknowledges (or not yet) makes no map entry per topic. Guarded by
// the subscription's wmu.
type nameIndex struct {
	m      map[string]uint64
	queued chunks[namedIndex]
}

type namedIndex struct {
	name  string
	index uint64
}

func (n *nameIndex) bind(name string, index uint64) {
	n.queued.add(namedIndex{name, index})
}

func (n *nameIndex) index(name string) (uint64, bool) {
	if n.queued.len() > 0 {
		if n.m == nil {
			n.m = make(map[string]uint64, n.queued.len())
		}
		n.queued.each(func(q *namedIndex) { n.m[q.name] = q.index })
		n.queued = chunks[namedIndex]{} // the map holds them now
	}
	idx, ok := n.m[name]
	return idx, ok
}
