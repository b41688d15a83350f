package client

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quicmq/quicmq/internal/wire"
)

// Order says how a consumer group keeps records in order (SubscribeOptions.OrderBy).
type Order byte

const (
	// OrderNone hands any record to any member: the most even split.
	OrderNone Order = Order(wire.OrderNone)
	// OrderByTopic hands a topic's records to one member at a time, in offset order, so a
	// group over "orders.>" scales out and keeps each topic's order, as Kafka partitions do.
	OrderByTopic Order = Order(wire.OrderTopic)
	// OrderByKey hands the records of one value of the "key" header (KeyHeader) to one
	// member at a time, in offset order; records without it share the empty key.
	OrderByKey Order = Order(wire.OrderKey)
)

// KeyHeader is the record header whose value keys OrderByKey.
const KeyHeader = wire.KeyHeader

// Dead-letter headers: a record written to a group's dead-letter topic carries these before
// its own headers.
const (
	DeadLetterTopicHeader      = "quicmq-dead-letter-topic"      // the topic it was read from
	DeadLetterOffsetHeader     = "quicmq-dead-letter-offset"     // its offset there (decimal)
	DeadLetterGroupHeader      = "quicmq-dead-letter-group"      // the group
	DeadLetterDeliveriesHeader = "quicmq-dead-letter-deliveries" // how often it was delivered (decimal)
	DeadLetterMemberHeader     = "quicmq-dead-letter-member"     // the member it was last delivered to
	DeadLetterReasonHeader     = "quicmq-dead-letter-reason"     // why its last delivery did not count
)

// groupState is what a Subscription keeps for groups and commits.
type groupState struct {
	commitSeq uint64        // the last COMMIT sent; under wmu
	committed atomic.Uint64 // the highest COMMITTED received
	waiters   atomic.Int32  // Commit calls waiting for Next to pass on a COMMITTED
	stash     []stashed     // frames (or the error) Commit read past, for Next; under readMu

	cmu     sync.Mutex
	changed chan struct{} // closed and replaced when a COMMITTED arrives or Next returns
}

func (g *groupState) poke() {
	g.cmu.Lock()
	if g.changed != nil {
		close(g.changed)
	}
	g.changed = make(chan struct{})
	g.cmu.Unlock()
}

func (g *groupState) wait() <-chan struct{} {
	g.cmu.Lock()
	defer g.cmu.Unlock()
	if g.changed == nil {
		g.changed = make(chan struct{})
	}
	return g.changed
}

// checkGroup refuses group options that would make a malformed SUBSCRIBE.
func checkGroup(opts SubscribeOptions) error {
	if opts.Standby && opts.Durable == "" {
		return errorf(CodeInvalidArgument, "Standby waits for an exclusive durable: set Durable too")
	}
	if opts.Group == "" {
		if opts.AckWait != 0 || opts.MaxDeliver != 0 || opts.DeadLetter != "" || opts.OrderBy != OrderNone {
			return errorf(CodeInvalidArgument, "AckWait, MaxDeliver, DeadLetter and OrderBy are settings of a group: set Group too")
		}
		return nil
	}
	switch {
	case opts.Durable != "":
		return errorf(CodeInvalidArgument, "a group member names no durable consumer (group %q, durable %q): the group is the named position", opts.Group, opts.Durable)
	case opts.AckWait < 0 || opts.AckWait > 24*time.Hour || opts.AckWait%time.Millisecond != 0:
		return errorf(CodeInvalidArgument, "ack-wait %v: want whole milliseconds up to 24 h (0: the group's)", opts.AckWait)
	case opts.MaxDeliver < 0 || opts.MaxDeliver > 1<<20:
		return errorf(CodeInvalidArgument, "max-deliver %d: want 1 to %d (0: the group's)", opts.MaxDeliver, 1<<20)
	case opts.OrderBy > OrderByKey:
		return errorf(CodeInvalidArgument, "order %d: want OrderNone, OrderByTopic or OrderByKey", opts.OrderBy)
	case len(opts.Group) > wire.DefaultLimits().MaxString || len(opts.DeadLetter) > wire.DefaultLimits().MaxString:
		return errorf(CodeInvalidArgument, "group or dead-letter name over %d bytes", wire.DefaultLimits().MaxString)
	}
	return nil
}

// groupBlock is the SUBSCRIBE's group block for opts, nil without a group.
func groupBlock(opts SubscribeOptions) *wire.Group {
	if opts.Group == "" {
		return nil
	}
	return &wire.Group{Name: opts.Group, AckWait: opts.AckWait, MaxDeliver: uint64(opts.MaxDeliver), DeadLetter: opts.DeadLetter, Order: byte(opts.OrderBy)}
}

// Nak gives a record of a group subscription back: the node delivers it again at once (to
// any member; with OrderBy, to this one), counting the delivery towards max-deliver. Only
// for groups.
func (s *Subscription) Nak(r Record) error {
	if s.opts.Group == "" {
		return fmt.Errorf("client: nak %s@%d: Nak is for group subscriptions (SubscribeOptions.Group)", r.Topic, r.Offset)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.sendDone {
		return ErrClosed
	}
	idx, ok := s.names.index(r.Topic)
	if !ok {
		return fmt.Errorf("client: nak: topic %q has no record on subscription %q", r.Topic, s.pattern)
	}
	s.ackBuf = wire.Append(s.ackBuf[:0], &wire.Nak{Index: idx, Offset: r.Offset})
	if _, err := s.s.Write(s.ackBuf); err != nil {
		return fmt.Errorf("client: nak %s@%d: %w", r.Topic, r.Offset, s.c.streamErr(err))
	}
	return nil
}

// Commit waits until the node confirms that every Ack (and Nak) made on this subscription
// before it is stored (synced): a durable consumer's positions, a group's acknowledged
// records. A consumer that exits right after Commit returns nil does not lose its position.
// It may be called while another goroutine waits in Next; if none does, Commit reads the
// stream itself and keeps the records it passes for the next Next. ctx bounds the wait. An
// ACK of a topic another node of the region owns is forwarded to that node: Commit confirms
// it was handed on, not that the owner stored it.
func (s *Subscription) Commit(ctx context.Context) error {
	s.wmu.Lock()
	if s.sendDone {
		s.wmu.Unlock()
		return ErrClosed
	}
	s.grp.commitSeq++
	seq := s.grp.commitSeq
	s.ackBuf = wire.Append(s.ackBuf[:0], &wire.Commit{Seq: seq})
	_, err := s.s.Write(s.ackBuf)
	s.wmu.Unlock()
	if err != nil {
		return fmt.Errorf("client: commit subscription %q: %w", s.pattern, s.c.streamErr(err))
	}
	s.grp.waiters.Add(1)
	defer s.grp.waiters.Add(-1)
	for {
		changed := s.grp.wait()
		if s.grp.committed.Load() >= seq {
			return nil
		}
		if s.readMu.TryLock() {
			err := s.readToCommitted(ctx, seq)
			s.readMu.Unlock()
			return err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("client: commit subscription %q: %w", s.pattern, ctx.Err())
		}
	}
}

// readToCommitted reads frames until COMMITTED seq, keeping the others for Next. readMu held.
func (s *Subscription) readToCommitted(ctx context.Context, seq uint64) error {
	for s.grp.committed.Load() < seq {
		if s.err != nil {
			return fmt.Errorf("client: commit subscription %q: %w", s.pattern, s.err)
		}
		if s.resuming {
			return fmt.Errorf("client: commit subscription %q: the stream ended before the node confirmed; Next makes the subscription again", s.pattern)
		}
		f, err := s.fr.next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("client: commit subscription %q: %w", s.pattern, ctx.Err())
			}
			// The stream failed: Next reports it (and resumes, with Reconnect); the ACKs
			// before this COMMIT may not be stored.
			s.grp.stash = append(s.grp.stash, stashed{err: err})
			return fmt.Errorf("client: commit subscription %q: the stream ended before the node confirmed: %w", s.pattern, s.readErr(err))
		}
		if c, ok := f.(*wire.Committed); ok {
			s.sawCommitted(c)
			continue
		}
		s.grp.stash = append(s.grp.stash, stashed{f: cloneFrame(f)})
	}
	return nil
}

// sawCommitted takes the node's COMMITTED.
func (s *Subscription) sawCommitted(c *wire.Committed) {
	if c.Seq > s.grp.committed.Load() {
		s.grp.committed.Store(c.Seq)
	}
	s.grp.poke()
}

// nextFrame is the next frame for Next: one Commit read past, or the stream's next.
func (s *Subscription) nextFrame(ctx context.Context) (wire.Frame, error) {
	if len(s.grp.stash) > 0 {
		st := s.grp.stash[0]
		s.grp.stash[0] = stashed{}
		s.grp.stash = s.grp.stash[1:]
		return st.f, st.err
	}
	return s.fr.next(ctx)
}

// nextDone is called when Next returns: a Commit waiting for the stream may read it now.
func (s *Subscription) nextDone() {
	if s.grp.waiters.Load() > 0 {
		s.grp.poke()
	}
}

// stashed is a frame, or the read error, Commit met, kept for Next.
type stashed struct {
	f   wire.Frame
	err error
}

// cloneFrame copies what a decoded frame points into (the frame reader's buffer).
func cloneFrame(f wire.Frame) wire.Frame {
	r, ok := f.(*wire.Record)
	if !ok {
		return f // only RECORD is decoded in place
	}
	c := *r
	c.OriginRegion = strings.Clone(r.OriginRegion)
	c.ProducerID = strings.Clone(r.ProducerID)
	c.Payload = append([]byte(nil), r.Payload...)
	if r.Headers != nil {
		c.Headers = make([]wire.Header, len(r.Headers))
		for i, h := range r.Headers {
			c.Headers[i] = wire.Header{Key: strings.Clone(h.Key), Value: append([]byte(nil), h.Value...)}
		}
	}
	return &c
}
