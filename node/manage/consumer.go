package manage

import (
	"slices"
	"strings"
	"time"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"
)

// Consumer is one consumer, durable or group, on one node or merged over a region, in the
// node's namespace (a tenant's consumer is "tenant/T/NAME", its topics "T.topic").
type Consumer struct {
	Name    string
	Kind    string // wire.KindDurable or wire.KindGroup
	Pattern string
	Pending uint64
	Members int
	LastAck time.Time
	Topics  []wire.ConsumerTopic
	// A group's settings (node names) and its outstanding records per topic; nil for a
	// durable.
	Group       *wire.ConsumerGroup
	Outstanding map[string]uint64
}

// Key keys a consumer in a listing: a durable and a group may share a name.
func Key(kind, name string) string {
	if kind == wire.KindGroup {
		return "group:" + name // ":" is in no consumer name
	}
	return name
}

// TopicNames are the names of c's topics, in c's order.
func (c *Consumer) TopicNames() []string {
	topics := make([]string, len(c.Topics))
	for i, t := range c.Topics {
		topics[i] = t.Topic
	}
	return topics
}

// Info is c as a client of a sees it; topics only when withTopics.
func (c Consumer) Info(a *auth.Principal, withTopics bool) *wire.ConsumerInfo {
	ci := &wire.ConsumerInfo{
		Name: a.ConsumerView(c.Name), Kind: c.Kind, Pending: c.Pending,
		Members: uint64(c.Members), LastAck: UnixNano(c.LastAck),
	}
	if ci.Kind == "" {
		ci.Kind = wire.KindDurable
	}
	if c.Pattern != "" {
		ci.Pattern = a.ClientName(c.Pattern)
	}
	if withTopics {
		ci.Topics = make([]wire.ConsumerTopic, len(c.Topics))
		for i, t := range c.Topics {
			t.Topic = a.ClientName(t.Topic)
			ci.Topics[i] = t
		}
	}
	if ci.Group = c.groupInfo(a); ci.Group != nil && !withTopics {
		ci.Group.TopicOutstanding = nil
	}
	return ci
}

// groupInfo is the group part of c's CONSUMER_INFO as a client of a sees it.
func (c *Consumer) groupInfo(a *auth.Principal) *wire.ConsumerGroup {
	if c.Group == nil {
		return nil
	}
	g := *c.Group
	if g.DeadLetter != "" {
		g.DeadLetter = a.ClientName(g.DeadLetter)
	}
	g.TopicOutstanding = nil
	for _, t := range c.Topics {
		g.TopicOutstanding = append(g.TopicOutstanding, c.Outstanding[t.Topic])
	}
	return &g
}

// FromPeer is a peer's CONSUMER_INFO (node names) as a Consumer.
func FromPeer(ci *wire.ConsumerInfo) Consumer {
	c := Consumer{Name: ci.Name, Kind: ci.Kind, Pattern: ci.Pattern, Pending: ci.Pending, Members: int(ci.Members), Topics: ci.Topics}
	if c.Kind == "" {
		c.Kind = wire.KindDurable
	}
	if ci.LastAck != 0 {
		c.LastAck = time.Unix(0, ci.LastAck)
	}
	if ci.Group == nil {
		return c
	}
	g := *ci.Group
	g.TopicOutstanding = nil
	c.Group = &g
	c.Outstanding = make(map[string]uint64, len(ci.Topics))
	for i, t := range ci.Topics {
		if i < len(ci.Group.TopicOutstanding) {
			c.Outstanding[t.Topic] = ci.Group.TopicOutstanding[i]
		}
	}
	return c
}

// Finish keeps of cs those a may manage (all but refusing one asked for by name), sorted
// by name with their topics sorted; where says where none was found ("on this node").
func Finish(a *auth.Principal, name string, cs map[string]*Consumer, where string) ([]Consumer, *wire.Error) {
	out := make([]Consumer, 0, len(cs))
	for _, c := range cs {
		names := c.TopicNames()
		if c.Kind == wire.KindGroup && c.Pattern != "" {
			names = append(names, c.Pattern) // a group's pattern too: it may have no topic yet
		}
		if e := a.MayManageConsumer(names); e != nil {
			if name != "" {
				return nil, e
			}
			continue
		}
		slices.SortFunc(c.Topics, func(x, y wire.ConsumerTopic) int { return strings.Compare(x.Topic, y.Topic) })
		out = append(out, *c)
	}
	slices.SortFunc(out, func(x, y Consumer) int {
		if c := strings.Compare(x.Name, y.Name); c != 0 {
			return c
		}
		return strings.Compare(x.Kind, y.Kind)
	})
	if name != "" && len(out) == 0 {
		return nil, wire.Errorf(wire.CodeNotFound, "no consumer %q: no durable consumer position or group state of that name is stored %s", a.ConsumerView(name), where)
	}
	return out, nil
}

// Ambiguous refuses an operation on a name that is both a durable consumer and a group
// (stored before names were kept apart).
func Ambiguous(a *auth.Principal, cs []Consumer) *wire.Error {
	if len(cs) < 2 {
		return nil
	}
	return wire.Errorf(wire.CodeConflict, "%q names both a durable consumer and a consumer group: `quicmq consumers rm %s` removes both",
		a.ConsumerView(cs[0].Name), a.ConsumerView(cs[0].Name))
}

// UnixNano is t in nanoseconds since the epoch, 0 for the zero time (none recorded).
func UnixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// SplitConsumer splits a stored consumer name into its tenant ("" for none) and its name
// there.
func SplitConsumer(stored string) (tenant, name string) {
	if rest, ok := strings.CutPrefix(stored, "tenant/"); ok {
		if t, nm, ok := strings.Cut(rest, "/"); ok {
			return t, nm
		}
	}
	return "", stored
}
