package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/quicmq/quicmq/federation"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"
	"github.com/quicmq/quicmq/node/manage"
	"github.com/quicmq/quicmq/wal"
)

// Consumer and topic management (docs/operations.md "Managing consumers and topics"). The
// operations here act on this node's log for a principal: a tenant sees and changes only
// its own consumers and topics, and only within its grants (docs/security.md). They are
// this node's side of node/manage (manage_local.go), which serves the client protocol and
// the admin API and, in a region of several nodes, asks the other nodes too.
//
// A durable consumer is its stored positions: "NAME" for a client without a tenant,
// "tenant/T/NAME" for tenant T. Mirror cursors ("mirror/REGION", federation's cursorName)
// are positions too but belong to federation: they are never listed as consumers, only named
// as dependents of a topic.

// mirrorCursorPrefix starts the position names of federation's mirror cursors.
const mirrorCursorPrefix = federation.CursorPrefix

// endPoll is how often a forced reset or removal checks whether the members it ended are
// gone (they end within one ack round trip).
const endPoll = 2 * time.Millisecond

// consumers returns the consumers of a on this node, durables and groups, sorted by name:
// all of them (name empty), or those called name (stored: one, unless a durable and a group
// share it). A consumer with a topic outside a's subscribe grant is left out of a listing
// and refused by name.
func (n *Node) consumers(a *auth.Principal, name string) ([]manage.Consumer, *wire.Error) {
	byName := make(map[string]*manage.Consumer)
	// Mirror cursors and mirrored positions are skipped by name, unread: a listing (each
	// metrics scrape makes one) costs nothing per mirrored topic.
	f := wal.PositionFilter{Name: name, NamePrefix: auth.ConsumerPrefix(a), SkipPrefix: mirrorCursorPrefix}
	err := n.wal.Positions(f, func(p wal.PositionInfo) bool {
		if strings.HasPrefix(p.Name, mirrorCursorPrefix) {
			return true
		}
		c := byName[p.Name]
		if c == nil {
			c = &manage.Consumer{Name: p.Name, Kind: wire.KindDurable}
			byName[p.Name] = c
		}
		c.Topics = append(c.Topics, wire.ConsumerTopic{Topic: p.Topic, Resume: p.Resume, Updated: manage.UnixNano(p.Updated)})
		if p.Updated.After(c.LastAck) {
			c.LastAck = p.Updated
		}
		return true
	})
	if err != nil {
		return nil, manageErr(err)
	}
	// Members connected now, and the pattern they subscribe with.
	for _, sub := range n.liveSubscriptions() {
		if c := byName[sub.Request().Durable]; c != nil {
			c.Members++
			c.Pattern = sub.Request().Pattern
		}
	}
	for _, c := range byName {
		total, per := n.wal.Pending(c.Name, c.TopicNames())
		c.Pending = total
		for i := range c.Topics {
			c.Topics[i].Next, c.Topics[i].Pending = per[i].Next, per[i].Pending
		}
	}
	if err := n.groupConsumers(a, name, byName); err != nil {
		return nil, manageErr(err)
	}
	return manage.Finish(a, name, byName, "on this node")
}

// endMembers ends the subscriptions connected under consumer name (stored) with e and waits
// until they are gone, so that no ACK of theirs is stored after what the caller does next.
func (n *Node) endMembers(ctx context.Context, name string, e *wire.Error) *wire.Error {
	for {
		left := 0
		for _, sub := range n.liveSubscriptions() {
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

// checkMembers refuses an operation on a consumer with connected members unless forced, in
// which case it ends them first.
func (n *Node) checkMembers(ctx context.Context, a *auth.Principal, c manage.Consumer, op string, force bool) *wire.Error {
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
		return n.endGroup(ctx, c.Name, e)
	}
	return n.endMembers(ctx, c.Name, e)
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

// resetConsumer moves every position of consumer name (stored) to start and returns the
// consumer after it.
func (n *Node) resetConsumer(ctx context.Context, a *auth.Principal, name string, kind wire.StartKind, value uint64, force bool) (manage.Consumer, *wire.Error) {
	cs, e := n.consumers(a, name)
	if e != nil {
		return manage.Consumer{}, e
	}
	if e := manage.Ambiguous(a, cs); e != nil {
		return manage.Consumer{}, e
	}
	start, e := walStart(kind, value)
	if e != nil {
		return manage.Consumer{}, e
	}
	if cs[0].Kind == wire.KindGroup {
		if e := n.resetGroup(ctx, a, cs[0], start, force); e != nil {
			return manage.Consumer{}, e
		}
		return n.resetDone(a, name, kind, value)
	}
	if e := n.checkMembers(ctx, a, cs[0], "reset", force); e != nil {
		return manage.Consumer{}, e
	}
	resume := make(map[string]uint64, len(cs[0].Topics))
	for _, t := range cs[0].Topics {
		off, err := n.wal.ResolveStart(t.Topic, start)
		if err != nil {
			return manage.Consumer{}, manageErr(err)
		}
		resume[t.Topic] = off
	}
	if err := n.wal.ResetPositions(ctx, name, resume); err != nil {
		return manage.Consumer{}, manageErr(err)
	}
	return n.resetDone(a, name, kind, value)
}

// resetDone logs a reset and returns the consumer after it.
func (n *Node) resetDone(a *auth.Principal, name string, kind wire.StartKind, value uint64) (manage.Consumer, *wire.Error) {
	n.log.Info("consumer reset", "consumer", name, "to", kind.String(), "value", value, "by", a.Name)
	cs, e := n.consumers(a, name)
	if e != nil {
		return manage.Consumer{}, e
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

// deleteConsumer removes consumer name (stored) and returns how many positions it had (a
// group: its topics' states). A durable and a group of one name are both removed.
func (n *Node) deleteConsumer(ctx context.Context, a *auth.Principal, name string, force bool) (int, *wire.Error) {
	cs, e := n.consumers(a, name)
	if e != nil {
		return 0, e
	}
	total := 0
	for _, c := range cs {
		var removed int
		if c.Kind == wire.KindGroup {
			if removed, e = n.removeGroup(ctx, a, c, force); e != nil {
				return total, e
			}
		} else {
			if e := n.checkMembers(ctx, a, c, "remove", force); e != nil {
				return total, e
			}
			var err error
			if removed, err = n.wal.DeletePosition(ctx, name); err != nil {
				return total, manageErr(err)
			}
		}
		total += removed
		n.log.Info("consumer removed", "consumer", name, "kind", c.Kind, "positions", removed, "by", a.Name)
	}
	return total, nil
}

// createTopic creates topic (node name) with cfg, or changes its configuration (update).
func (n *Node) createTopic(ctx context.Context, a *auth.Principal, topic string, cfg wal.TopicConfig, update bool) (wal.TopicInfo, *wire.Error) {
	var ti wal.TopicInfo
	var err error
	if update {
		ti, err = n.wal.SetTopicConfig(ctx, topic, cfg)
	} else {
		ti, err = n.wal.CreateTopic(ctx, topic, cfg)
	}
	var exists *wal.TopicExistsError
	if errors.As(err, &exists) {
		return wal.TopicInfo{}, wire.Errorf(wire.CodeInvalidArgument, "topic %q exists with another configuration (%s): update it with --update",
			a.ClientName(topic), exists.Config)
	}
	if err != nil {
		return wal.TopicInfo{}, manageErr(err)
	}
	n.log.Info("topic created or configured", "topic", topic, "config", cfg.String(), "by", a.Name)
	return ti, nil
}

// removeTopic purges or deletes topic (node name), refused while consumers or mirror
// cursors have positions on it unless forced. It returns the records deleted.
func (n *Node) removeTopic(ctx context.Context, a *auth.Principal, topic string, op byte, force bool) (uint64, *wire.Error) {
	if _, _, ok := n.wal.Bounds(topic); !ok {
		return 0, wire.Errorf(wire.CodeNotFound, "no topic %q on this node", a.ClientName(topic))
	}
	what := "purge"
	if op == wire.RemoveDelete {
		what = "delete"
	}
	if !force {
		if deps := n.dependents(a, topic); len(deps) > 0 {
			loses := "they would skip every record not yet read"
			if op == wire.RemoveDelete {
				loses = "their positions on it would be deleted with it"
			}
			return 0, wire.Errorf(wire.CodeInUse, "topic %q has dependents: %s; %s. Remove them first, or %s with --force",
				a.ClientName(topic), strings.Join(deps, ", "), loses, what)
		}
	}
	var records uint64
	var err error
	if op == wire.RemoveDelete {
		records, err = n.wal.DeleteTopic(ctx, topic)
		if err == nil {
			n.metrics.topic.forget(topic)
			n.topicRemoved(topic, true, 0)
		}
	} else {
		var r wal.PurgeResult
		r, err = n.wal.PurgeTopic(ctx, topic)
		records = r.Records
		if err == nil {
			n.topicRemoved(topic, false, r.Next)
		}
	}
	if err != nil {
		return 0, manageErr(err)
	}
	n.log.Info("topic "+what+"d", "topic", topic, "records", records, "forced", force, "by", a.Name)
	return records, nil
}

// dependents names what has a position on topic: durable consumers and consumer groups (as
// a sees them) and mirror cursors (by region).
func (n *Node) dependents(a *auth.Principal, topic string) []string {
	var deps []string
	n.wal.Positions(wal.PositionFilter{Topic: topic}, func(p wal.PositionInfo) bool {
		if region, ok := strings.CutPrefix(p.Name, mirrorCursorPrefix); ok {
			deps = append(deps, fmt.Sprintf("the mirror cursor of region %q", region))
		} else {
			deps = append(deps, fmt.Sprintf("durable consumer %q", a.ConsumerView(p.Name)))
		}
		return true
	})
	deps = append(deps, n.groupDependents(a, topic)...)
	slices.Sort(deps)
	return deps
}

// manageErr maps a log error to the error a client gets.
func manageErr(err error) *wire.Error {
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

// forget deletes a deleted topic's publish series; a topic of the same name created later
// starts them again.
func (t *topicMetrics) forget(topic string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.mu.series[topic]; !ok {
		return
	}
	delete(t.mu.series, topic)
	t.records.DeleteLabelValues(topic)
	t.bytes.DeleteLabelValues(topic)
}
