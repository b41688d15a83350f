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
	"github.com/quicmq/quicmq/wal"
)

// Consumer and topic management (docs/operations.md "Managing consumers and topics"). The
// operations here act on this node's log for a principal: a tenant sees and changes only
// its own consumers and topics, and only within its grants (docs/security.md). The client
// protocol (manage_wire.go) and the admin API (manage_admin.go) both call them; in a region
// of several nodes manage_wire.go asks the other nodes too.
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

// consumerPrefix is the position-name prefix of a's consumers ("" for a principal without a
// tenant: it sees every consumer of the node but mirror cursors).

// consumerState is one consumer on this node, in the node's namespace.
type consumerState struct {
	name    string
	kind    string // wire.KindDurable or wire.KindGroup
	pattern string
	pending uint64
	members int
	lastAck time.Time
	topics  []wire.ConsumerTopic
	// A group's settings (node names) and its outstanding records per topic
	// (manage_groups.go); nil for a durable.
	group       *wire.ConsumerGroup
	outstanding map[string]uint64
}

// consumers returns the consumers of a on this node, durables and groups, sorted by name:
// all of them (name empty), or those called name (stored: one, unless a durable and a group
// share it). A consumer with a topic outside a's subscribe grant is left out of a listing
// and refused by name.
func (n *Node) consumers(a *auth.Principal, name string) ([]consumerState, *wire.Error) {
	byName := make(map[string]*consumerState)
	f := wal.PositionFilter{Name: name, NamePrefix: auth.ConsumerPrefix(a)}
	err := n.wal.Positions(f, func(p wal.PositionInfo) bool {
		if strings.HasPrefix(p.Name, mirrorCursorPrefix) {
			return true
		}
		c := byName[p.Name]
		if c == nil {
			c = &consumerState{name: p.Name, kind: wire.KindDurable}
			byName[p.Name] = c
		}
		c.topics = append(c.topics, wire.ConsumerTopic{Topic: p.Topic, Resume: p.Resume, Updated: unixNano(p.Updated)})
		if p.Updated.After(c.lastAck) {
			c.lastAck = p.Updated
		}
		return true
	})
	if err != nil {
		return nil, manageErr(err)
	}
	// Members connected now, and the pattern they subscribe with.
	for _, sub := range n.liveSubscriptions() {
		if c := byName[sub.req.Durable]; c != nil {
			c.members++
			c.pattern = sub.req.Pattern
		}
	}
	for _, c := range byName {
		total, per := n.wal.Pending(c.name, c.topicNames())
		c.pending = total
		for i := range c.topics {
			c.topics[i].Next, c.topics[i].Pending = per[i].Next, per[i].Pending
		}
	}
	if err := n.groupConsumers(a, name, byName); err != nil {
		return nil, manageErr(err)
	}
	return finishConsumers(a, name, byName, "on this node")
}

// finishConsumers keeps of cs those a may manage (all but refusing one asked for by name),
// sorted by name with their topics sorted; where says where none was found ("on this node").
func finishConsumers(a *auth.Principal, name string, cs map[string]*consumerState, where string) ([]consumerState, *wire.Error) {
	out := make([]consumerState, 0, len(cs))
	for _, c := range cs {
		names := c.topicNames()
		if c.kind == wire.KindGroup && c.pattern != "" {
			names = append(names, c.pattern) // a group's pattern too: it may have no topic yet
		}
		if e := a.MayManageConsumer(names); e != nil {
			if name != "" {
				return nil, e
			}
			continue
		}
		slices.SortFunc(c.topics, func(x, y wire.ConsumerTopic) int { return strings.Compare(x.Topic, y.Topic) })
		out = append(out, *c)
	}
	slices.SortFunc(out, func(x, y consumerState) int {
		if c := strings.Compare(x.name, y.name); c != 0 {
			return c
		}
		return strings.Compare(x.kind, y.kind)
	})
	if name != "" && len(out) == 0 {
		return nil, wire.Errorf(wire.CodeNotFound, "no consumer %q: no durable consumer position or group state of that name is stored %s", a.ConsumerView(name), where)
	}
	return out, nil
}

func (c *consumerState) topicNames() []string {
	topics := make([]string, len(c.topics))
	for i, t := range c.topics {
		topics[i] = t.Topic
	}
	return topics
}

// info is c as a client of a sees it; topics only when withTopics.
func (c consumerState) info(a *auth.Principal, withTopics bool) *wire.ConsumerInfo {
	ci := &wire.ConsumerInfo{
		Name: a.ConsumerView(c.name), Kind: c.kind, Pending: c.pending,
		Members: uint64(c.members), LastAck: unixNano(c.lastAck),
	}
	if ci.Kind == "" {
		ci.Kind = wire.KindDurable
	}
	if c.pattern != "" {
		ci.Pattern = a.ClientName(c.pattern)
	}
	if withTopics {
		ci.Topics = make([]wire.ConsumerTopic, len(c.topics))
		for i, t := range c.topics {
			t.Topic = a.ClientName(t.Topic)
			ci.Topics[i] = t
		}
	}
	if ci.Group = c.groupInfo(a); ci.Group != nil && !withTopics {
		ci.Group.TopicOutstanding = nil
	}
	return ci
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// endMembers ends the subscriptions connected under consumer name (stored) with e and waits
// until they are gone, so that no ACK of theirs is stored after what the caller does next.
func (n *Node) endMembers(ctx context.Context, name string, e *wire.Error) *wire.Error {
	for {
		left := 0
		for _, sub := range n.liveSubscriptions() {
			if sub.req.Durable == name {
				left++
				sub.ackErr.CompareAndSwap(nil, e)
				sub.cancel()
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
func (n *Node) checkMembers(ctx context.Context, a *auth.Principal, c consumerState, op string, force bool) *wire.Error {
	if c.members == 0 {
		return nil
	}
	view := a.ConsumerView(c.name)
	what := "consumer"
	if c.kind == wire.KindGroup {
		what = "consumer group"
	}
	if !force {
		return wire.Errorf(wire.CodeInUse, "%s %q has %d connected %s: stop %s first, or %s it with --force, which ends %s",
			what, view, c.members, plural(c.members, "member", "members"), pronoun(c.members), op, pronoun(c.members))
	}
	e := wire.Errorf(wire.CodeInUse, "%s %q was %s by %s", what, view, pastTense(op), a.Name)
	if c.kind == wire.KindGroup {
		return n.endGroup(ctx, c.name, e)
	}
	return n.endMembers(ctx, c.name, e)
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
func (n *Node) resetConsumer(ctx context.Context, a *auth.Principal, name string, kind wire.StartKind, value uint64, force bool) (consumerState, *wire.Error) {
	cs, e := n.consumers(a, name)
	if e != nil {
		return consumerState{}, e
	}
	if e := ambiguous(a, cs); e != nil {
		return consumerState{}, e
	}
	start, e := walStart(kind, value)
	if e != nil {
		return consumerState{}, e
	}
	if cs[0].kind == wire.KindGroup {
		if e := n.resetGroup(ctx, a, cs[0], start, force); e != nil {
			return consumerState{}, e
		}
		return n.resetDone(a, name, kind, value)
	}
	if e := n.checkMembers(ctx, a, cs[0], "reset", force); e != nil {
		return consumerState{}, e
	}
	resume := make(map[string]uint64, len(cs[0].topics))
	for _, t := range cs[0].topics {
		off, err := n.wal.ResolveStart(t.Topic, start)
		if err != nil {
			return consumerState{}, manageErr(err)
		}
		resume[t.Topic] = off
	}
	if err := n.wal.ResetPositions(ctx, name, resume); err != nil {
		return consumerState{}, manageErr(err)
	}
	return n.resetDone(a, name, kind, value)
}

// resetDone logs a reset and returns the consumer after it.
func (n *Node) resetDone(a *auth.Principal, name string, kind wire.StartKind, value uint64) (consumerState, *wire.Error) {
	n.log.Info("consumer reset", "consumer", name, "to", kind.String(), "value", value, "by", a.Name)
	cs, e := n.consumers(a, name)
	if e != nil {
		return consumerState{}, e
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
		if c.kind == wire.KindGroup {
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
		n.log.Info("consumer removed", "consumer", name, "kind", c.kind, "positions", removed, "by", a.Name)
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
