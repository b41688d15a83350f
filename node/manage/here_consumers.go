package manage

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/quicmq/quicmq/federation"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"
	"github.com/quicmq/quicmq/wal"
)

// This node's consumers (Here): durables from their stored positions and live members,
// groups from here_groups.go; a reset or removal of one, its members checked first.

// Consumers returns the consumers of a on this node, durables and groups, sorted by name:
// all of them (name empty), or those called name (stored: one, unless a durable and a group
// share it). A consumer with a topic outside a's subscribe grant is left out of a listing
// and refused by name.
func (h *Here) Consumers(a *auth.Principal, name string) ([]Consumer, *wire.Error) {
	byName := make(map[string]*Consumer)
	// Mirror cursors and mirrored positions are skipped by name, unread: a listing (each
	// metrics scrape makes one) costs nothing per mirrored topic.
	f := wal.PositionFilter{Name: name, NamePrefix: auth.ConsumerPrefix(a), SkipPrefix: federation.CursorPrefix}
	err := h.cfg.Wal.Positions(f, func(p wal.PositionInfo) bool {
		if strings.HasPrefix(p.Name, federation.CursorPrefix) {
			return true
		}
		c := byName[p.Name]
		if c == nil {
			c = &Consumer{Name: p.Name, Kind: wire.KindDurable}
			byName[p.Name] = c
		}
		c.Topics = append(c.Topics, wire.ConsumerTopic{Topic: p.Topic, Resume: p.Resume, Updated: UnixNano(p.Updated)})
		if p.Updated.After(c.LastAck) {
			c.LastAck = p.Updated
		}
		return true
	})
	if err != nil {
		return nil, walErr(err)
	}
	// Members connected now, and the pattern they subscribe with.
	for _, sub := range h.cfg.Subscriptions() {
		if c := byName[sub.Request().Durable]; c != nil {
			c.Members++
			c.Pattern = sub.Request().Pattern
		}
	}
	for _, c := range byName {
		total, per := h.cfg.Wal.Pending(c.Name, c.TopicNames())
		c.Pending = total
		for i := range c.Topics {
			c.Topics[i].Next, c.Topics[i].Pending = per[i].Next, per[i].Pending
		}
	}
	if err := h.groupConsumers(a, name, byName); err != nil {
		return nil, walErr(err)
	}
	return Finish(a, name, byName, "on this node")
}

// endMembers ends the subscriptions connected under consumer name (stored) with e and waits
// until they are gone, so that no ACK of theirs is stored after what the caller does next.
func (h *Here) endMembers(ctx context.Context, name string, e *wire.Error) *wire.Error {
	for {
		left := 0
		for _, sub := range h.cfg.Subscriptions() {
			if sub.Request().Durable == name {
				left++
				sub.End(e)
			}
		}
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return wire.Errorf(wire.CodeUnavailable, "consumer %q: its members did not end: %v", name, ctx.Err())
		case <-time.After(endPoll):
		}
	}
}

// CheckMembers refuses an operation on a consumer with connected members unless forced, in
// which case it ends them first.
func (h *Here) CheckMembers(ctx context.Context, a *auth.Principal, c Consumer, op string, force bool) *wire.Error {
	if c.Members == 0 {
		return nil
	}
	view := a.ConsumerView(c.Name)
	what := "consumer"
	if c.Kind == wire.KindGroup {
		what = "consumer group"
	}
	if !force {
		return wire.Errorf(wire.CodeInUse, "%s %q has %d connected %s: stop %s first, or %s it with --force, which ends %s",
			what, view, c.Members, plural(c.Members, "member", "members"), pronoun(c.Members), op, pronoun(c.Members))
	}
	e := wire.Errorf(wire.CodeInUse, "%s %q was %s by %s", what, view, pastTense(op), a.Name)
	if c.Kind == wire.KindGroup {
		return h.endGroup(ctx, c.Name, e)
	}
	return h.endMembers(ctx, c.Name, e)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func pronoun(n int) string { return plural(n, "it", "them") }

func pastTense(op string) string {
	if op == "remove" {
		return "removed"
	}
	return op // "reset"
}

// ResetConsumer moves every position of consumer name (stored) to start and returns the
// consumer after it.
func (h *Here) ResetConsumer(ctx context.Context, a *auth.Principal, name string, kind wire.StartKind, value uint64, force bool) (Consumer, *wire.Error) {
	cs, e := h.Consumers(a, name)
	if e != nil {
		return Consumer{}, e
	}
	if e := Ambiguous(a, cs); e != nil {
		return Consumer{}, e
	}
	start, e := walStart(kind, value)
	if e != nil {
		return Consumer{}, e
	}
	if cs[0].Kind == wire.KindGroup {
		if e := h.resetGroup(ctx, a, cs[0], start, force); e != nil {
			return Consumer{}, e
		}
		return h.resetDone(a, name, kind, value)
	}
	if e := h.CheckMembers(ctx, a, cs[0], "reset", force); e != nil {
		return Consumer{}, e
	}
	resume := make(map[string]uint64, len(cs[0].Topics))
	for _, t := range cs[0].Topics {
		off, err := h.cfg.Wal.ResolveStart(t.Topic, start)
		if err != nil {
			return Consumer{}, walErr(err)
		}
		resume[t.Topic] = off
	}
	if err := h.cfg.Wal.ResetPositions(ctx, name, resume); err != nil {
		return Consumer{}, walErr(err)
	}
	return h.resetDone(a, name, kind, value)
}

// resetDone logs a reset and returns the consumer after it.
func (h *Here) resetDone(a *auth.Principal, name string, kind wire.StartKind, value uint64) (Consumer, *wire.Error) {
	h.cfg.Log.Info("consumer reset", "consumer", name, "to", kind.String(), "value", value, "by", a.Name)
	cs, e := h.Consumers(a, name)
	if e != nil {
		return Consumer{}, e
	}
	return cs[0], nil
}

func walStart(kind wire.StartKind, value uint64) (wal.Start, *wire.Error) {
	switch kind {
	case wire.StartEarliest:
		return wal.Start{Kind: wal.StartEarliest}, nil
	case wire.StartLatest:
		return wal.Start{Kind: wal.StartLatest}, nil
	case wire.StartOffset:
		return wal.Start{Kind: wal.StartOffset, Offset: value}, nil
	case wire.StartTime:
		return wal.Start{Kind: wal.StartTime, Time: time.Unix(0, int64(value))}, nil
	}
	return wal.Start{}, wire.Errorf(wire.CodeInvalidArgument, "start kind %d: want 0 (earliest), 1 (latest), 2 (offset) or 3 (time)", kind)
}

// DeleteConsumer removes consumer name (stored) and returns how many positions it had (a
// group: its topics' states). A durable and a group of one name are both removed.
func (h *Here) DeleteConsumer(ctx context.Context, a *auth.Principal, name string, force bool) (int, *wire.Error) {
	cs, e := h.Consumers(a, name)
	if e != nil {
		return 0, e
	}
	total := 0
	for _, c := range cs {
		var removed int
		if c.Kind == wire.KindGroup {
			if removed, e = h.removeGroup(ctx, a, c, force); e != nil {
				return total, e
			}
		} else {
			if e := h.CheckMembers(ctx, a, c, "remove", force); e != nil {
				return total, e
			}
			var err error
			if removed, err = h.cfg.Wal.DeletePosition(ctx, name); err != nil {
				return total, walErr(err)
			}
		}
		total += removed
		h.cfg.Log.Info("consumer removed", "consumer", name, "kind", c.Kind, "positions", removed, "by", a.Name)
	}
	return total, nil
}

// walErr maps a log error to the error a client gets.
func walErr(err error) *wire.Error {
	_, isOOR := errors.AsType[*wal.OffsetOutOfRangeError](err)
	switch {
	case isOOR:
		return wire.Errorf(wire.CodeOffsetOutOfRange, "%v", err)
	case errors.Is(err, wal.ErrTopicDeleted):
		return wire.Errorf(wire.CodeTopicDeleted, "%v", err)
	case errors.Is(err, wal.ErrUnknownTopic):
		return wire.Errorf(wire.CodeNotFound, "%v", err)
	case errors.Is(err, wal.ErrInvalidRequest):
		return wire.Errorf(wire.CodeInvalidArgument, "%v", err)
	case errors.Is(err, wal.ErrClosed):
		return wire.Errorf(wire.CodeShuttingDown, "node shutting down")
	}
	return wire.Errorf(wire.CodeInternal, "%v", err)
}
