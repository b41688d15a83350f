package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/quicmq/quicmq/internal/wire"
)

// Error codes of consumer and topic management.
const (
	CodeTopicDeleted Code = 20 // the subscription's topic was deleted (Conn.DeleteTopic); subscribe again
	CodeInUse        Code = 21 // refused without Force: the consumer has members, or the topic has dependents
)

// Consumer kinds.
const (
	KindDurable = wire.KindDurable // a durable consumer (SubscribeOptions.Durable)
	KindGroup   = wire.KindGroup   // a shared group
)

// ConsumerInfo describes a consumer of the connection's tenant, in the node's region.
type ConsumerInfo struct {
	Name    string
	Kind    string // KindDurable or KindGroup
	Pattern string // its subscription pattern: a group's always, a durable's while a member is connected; else ""
	Pending uint64 // records of its topics not yet acknowledged
	Members int    // subscription streams connected under its name now
	LastAck time.Time
	Topics  []ConsumerTopic // ConsumerInfo, ResetConsumer only
	// Group is set for KindGroup: the group's settings and its outstanding records.
	Group *GroupInfo
}

// GroupInfo is what ConsumerInfo says of a consumer group besides a durable's fields.
type GroupInfo struct {
	AckWait    time.Duration
	MaxDeliver int
	DeadLetter string // "" when records that reach MaxDeliver are dropped
	OrderBy    Order
	// Outstanding counts the records handed to members and not yet acknowledged (Pending
	// counts them too, with the records not handed out yet).
	Outstanding uint64
}

// ConsumerTopic is a consumer's state on one topic.
type ConsumerTopic struct {
	Topic   string
	Resume  uint64 // the offset it resumes at
	Next    uint64 // the topic's head: the offset of its next record
	Pending uint64 // records from Resume (or the first retained) to Next; a group's: not yet acknowledged
	Updated time.Time
	// Outstanding (groups) counts this topic's records handed to members and not yet
	// acknowledged. A group's Resume is its floor: every record below it is done.
	Outstanding uint64
}

// ManageOptions are the options of a state-changing management call.
type ManageOptions struct {
	// Force does it although the consumer has connected members (the node ends them first,
	// with CodeInUse) or the topic has dependents (durable consumers, mirror cursors).
	// Without it such a call fails with CodeInUse naming them.
	Force bool
}

func (o ManageOptions) flags() uint64 {
	if o.Force {
		return wire.ManageForce
	}
	return 0
}

// TopicOptions configure a topic created with CreateTopic.
type TopicOptions struct {
	// Retention gives the topic retention of its own: MaxAge (0: no age limit) and MaxBytes
	// (0: no size limit). Nil: the node's default retention.
	Retention *TopicRetention
	// Update changes the configuration of an existing topic; without it CreateTopic on a topic
	// that exists with another configuration fails with CodeInvalidArgument.
	Update bool
	// Replicas is the topic's replica count in a replicated region, set when it is created
	// (0: the region's --replicas). Asking a count other than an existing topic's fails with
	// CodeInvalidArgument, as does more than one in a region that does not replicate.
	Replicas int
}

// TopicRetention is a topic's own retention.
type TopicRetention struct {
	MaxAge   time.Duration
	MaxBytes int64
}

// Consumers lists the consumers of the connection's tenant (the durable consumers and
// consumer groups whose topics its grants cover), sorted by name.
func (c *Conn) Consumers(ctx context.Context) ([]ConsumerInfo, error) {
	var out []ConsumerInfo
	err := c.manage(ctx, "consumers", &wire.Consumers{}, func(f wire.Frame) error {
		ci, ok := f.(*wire.ConsumerInfo)
		if !ok {
			return errUnexpected(f)
		}
		out = append(out, consumerInfo(ci))
		return nil
	})
	return out, err
}

// ConsumerInfo describes consumer name with its state per topic. A name without a stored
// position fails with CodeNotFound.
func (c *Conn) ConsumerInfo(ctx context.Context, name string) (ConsumerInfo, error) {
	return c.oneConsumer(ctx, fmt.Sprintf("consumer %q", name), &wire.Consumers{Name: name})
}

// ResetConsumer moves every topic position of consumer name to "from" (Earliest, Latest,
// AtOffset(n) on each of its topics, or AtTime(t)) and returns the consumer after it; a
// group's floor moves there on each topic it has state on, and its outstanding records are
// forgotten in the same write. It fails with CodeInUse while members are connected, unless
// opts.Force (which ends them); with CodeOffsetOutOfRange for an offset outside a topic's
// retained records.
func (c *Conn) ResetConsumer(ctx context.Context, name string, from Start, opts ManageOptions) (ConsumerInfo, error) {
	return c.oneConsumer(ctx, fmt.Sprintf("reset consumer %q to %s", name, from),
		&wire.ConsumerReset{Name: name, Start: from.kind, StartValue: from.value, Flags: opts.flags()})
}

func (c *Conn) oneConsumer(ctx context.Context, op string, req wire.Frame) (ConsumerInfo, error) {
	return single(c, ctx, op, req, "consumer", func(f wire.Frame) (ConsumerInfo, bool) {
		ci, ok := f.(*wire.ConsumerInfo)
		if !ok {
			return ConsumerInfo{}, false
		}
		return consumerInfo(ci), true
	})
}

// single runs a request answered by exactly one frame, which conv converts (false: not the
// frame expected); what names it in the error when none came.
func single[T any](c *Conn, ctx context.Context, op string, req wire.Frame, what string, conv func(wire.Frame) (T, bool)) (T, error) {
	var out T
	got := false
	err := c.manage(ctx, op, req, func(f wire.Frame) error {
		v, ok := conv(f)
		if !ok || got {
			return errUnexpected(f)
		}
		out, got = v, true
		return nil
	})
	if err == nil && !got {
		err = wrap(op, errorf(CodeProtocol, "the node answered with no %s", what))
	}
	if err != nil {
		var zero T
		return zero, err
	}
	return out, nil
}

// DeleteConsumer removes consumer name (all its positions; a group: its settings and every
// topic's state) and returns how many positions (a group: topic states) it had. It fails
// with CodeInUse while members are connected, unless opts.Force.
func (c *Conn) DeleteConsumer(ctx context.Context, name string, opts ManageOptions) (int, error) {
	n, err := c.done(ctx, fmt.Sprintf("delete consumer %q", name), &wire.ConsumerDelete{Name: name, Flags: opts.flags()})
	return int(n), err
}

// CreateTopic creates an empty topic (the same configuration again is no error) and returns
// it.
func (c *Conn) CreateTopic(ctx context.Context, name string, opts TopicOptions) (TopicInfo, error) {
	req := &wire.TopicCreate{Topic: name}
	if opts.Replicas < 0 {
		return TopicInfo{}, wrap(fmt.Sprintf("create topic %q", name), errorf(CodeInvalidArgument, "replicas %d: want at least 1 (0: the region's)", opts.Replicas))
	}
	req.Replicas = uint64(opts.Replicas)
	if opts.Update {
		req.Flags |= wire.ManageUpdate
	}
	if r := opts.Retention; r != nil {
		if r.MaxAge < 0 || r.MaxBytes < 0 {
			return TopicInfo{}, wrap(fmt.Sprintf("create topic %q", name), errorf(CodeInvalidArgument, "retention must not be negative (max age %v, max bytes %d)", r.MaxAge, r.MaxBytes))
		}
		req.Flags |= wire.ManageRetention
		req.MaxAge, req.MaxBytes = uint64(r.MaxAge), uint64(r.MaxBytes)
	}
	return single(c, ctx, fmt.Sprintf("create topic %q", name), req, "topic", func(f wire.Frame) (TopicInfo, bool) {
		ti, ok := f.(*wire.TopicInfo)
		if !ok {
			return TopicInfo{}, false
		}
		return topicInfo(ti), true
	})
}

// PurgeTopic deletes every record of a topic, keeping the topic, its offsets (the next
// record gets the next offset) and its consumers, and returns the records deleted. It fails
// with CodeInUse while durable consumers, consumer groups or mirror cursors have positions
// on it, unless opts.Force. Consumer groups' floors on it move past the purge.
func (c *Conn) PurgeTopic(ctx context.Context, name string, opts ManageOptions) (uint64, error) {
	return c.done(ctx, fmt.Sprintf("purge topic %q", name), &wire.TopicRemove{Topic: name, Op: wire.RemovePurge, Flags: opts.flags()})
}

// DeleteTopic deletes a topic with its records and every position of it (consumers'
// positions, consumer groups' states, mirror cursors), and returns the records deleted.
// Subscriptions reading it end with CodeTopicDeleted. It fails with CodeInUse while durable
// consumers, consumer groups or mirror cursors have positions on it, unless opts.Force.
func (c *Conn) DeleteTopic(ctx context.Context, name string, opts ManageOptions) (uint64, error) {
	return c.done(ctx, fmt.Sprintf("delete topic %q", name), &wire.TopicRemove{Topic: name, Op: wire.RemoveDelete, Flags: opts.flags()})
}

func (c *Conn) done(ctx context.Context, op string, req wire.Frame) (uint64, error) {
	return single(c, ctx, op, req, "DONE", func(f wire.Frame) (uint64, bool) {
		d, ok := f.(*wire.Done)
		if !ok {
			return 0, false
		}
		return d.Count, true
	})
}

func errUnexpected(f wire.Frame) error {
	return errorf(CodeProtocol, "the node sent %s on a management stream", f.Type())
}

// manage runs one request on a stream of its own: req, then the node's frames to its FIN,
// each handed to fn. Errors are wrapped with op.
func (c *Conn) manage(ctx context.Context, op string, req wire.Frame, fn func(wire.Frame) error) error {
	err := c.request(ctx, req, fn)
	if err != nil {
		return wrap(op, err)
	}
	return nil
}

// request is manage without the wrapping: the stream helper of Topics too.
func (c *Conn) request(ctx context.Context, req wire.Frame, fn func(wire.Frame) error) error {
	s, err := c.openStream(ctx)
	if err != nil {
		return err
	}
	// The stream serves this call only, so an ended ctx simply aborts it.
	stop := context.AfterFunc(ctx, func() {
		s.CancelRead(wire.AppCancelled)
		s.CancelWrite(wire.AppCancelled)
	})
	defer stop()
	defer s.CancelRead(wire.AppCancelled) // no-op after a clean end; frees the stream otherwise
	fail := func(err error) error {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		s.CancelWrite(wire.AppCancelled)
		return err
	}
	if _, err := s.Write(wire.Append(nil, req)); err != nil {
		return fail(c.streamErr(err))
	}
	// The node may have answered and stopped reading already, which makes Close fail; the
	// answer is what counts, and reading it reports any real failure.
	s.Close()
	r := wire.NewReader(s, c.lim)
	for {
		f, err := r.Read()
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case errors.Is(err, wire.ErrMalformed), errors.Is(err, wire.ErrFrameTooLarge), errors.Is(err, io.ErrUnexpectedEOF):
			return fail(errorf(CodeProtocol, "%v", err))
		case err != nil:
			return fail(c.streamErr(err))
		}
		if ef, ok := f.(*wire.ErrorFrame); ok {
			return fail(fromWire(ef.Code, ef.Message))
		}
		if err := fn(f); err != nil {
			return fail(err)
		}
	}
}

func consumerInfo(ci *wire.ConsumerInfo) ConsumerInfo {
	out := ConsumerInfo{Name: ci.Name, Kind: ci.Kind, Pattern: ci.Pattern, Pending: ci.Pending,
		Members: int(ci.Members), LastAck: fromUnixNano(ci.LastAck)}
	for i, t := range ci.Topics {
		ct := ConsumerTopic{Topic: t.Topic, Resume: t.Resume, Next: t.Next, Pending: t.Pending, Updated: fromUnixNano(t.Updated)}
		if g := ci.Group; g != nil && i < len(g.TopicOutstanding) {
			ct.Outstanding = g.TopicOutstanding[i]
		}
		out.Topics = append(out.Topics, ct)
	}
	if g := ci.Group; g != nil {
		out.Group = &GroupInfo{AckWait: time.Duration(min(g.AckWait, 1<<63-1)), MaxDeliver: int(min(g.MaxDeliver, 1<<31-1)),
			DeadLetter: g.DeadLetter, OrderBy: Order(g.Order), Outstanding: g.Outstanding}
	}
	return out
}

func fromUnixNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}
