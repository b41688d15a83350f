package manage

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/quicmq/quicmq/federation"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"
	"github.com/quicmq/quicmq/wal"
)

// Local is what a node does for management on its own log, and how it reaches the other
// nodes of its region. The node implements it; Manager composes it into region-wide
// operations. Consumer and topic names are the node's (stored), and every method checks the
// principal's grants for what it touches.
type Local interface {
	// Consumers returns the consumers of a on this node, durables and groups, sorted by
	// name: all of them (name empty), or those called name (one, unless a durable and a
	// group share it; none is CodeNotFound).
	Consumers(a *auth.Principal, name string) ([]Consumer, *wire.Error)
	// ResetConsumer moves every position of consumer name on this node to where kind and
	// value say, refused while it has members here unless forced, and returns it after.
	ResetConsumer(ctx context.Context, a *auth.Principal, name string, kind wire.StartKind, value uint64, force bool) (Consumer, *wire.Error)
	// DeleteConsumer removes consumer name from this node and returns how many positions
	// (a group: topic states) it had.
	DeleteConsumer(ctx context.Context, a *auth.Principal, name string, force bool) (int, *wire.Error)
	// CheckMembers refuses op on c while it has members on this node, unless forced, in
	// which case it ends them and returns once they are gone.
	CheckMembers(ctx context.Context, a *auth.Principal, c Consumer, op string, force bool) *wire.Error
	// CreateTopic creates topic stored on this node with cfg, or changes its
	// configuration (update), and returns its TOPIC_INFO (node names).
	CreateTopic(ctx context.Context, a *auth.Principal, stored string, cfg wal.TopicConfig, update bool) (wire.TopicInfo, *wire.Error)
	// RemoveTopic purges or deletes (op) topic stored of this node's log, refused while
	// it has dependents unless forced, and returns the records deleted.
	RemoveTopic(ctx context.Context, a *auth.Principal, stored string, op byte, force bool) (uint64, *wire.Error)
	// RemoveReplicated does f on a replicated topic of the region through its group. ok
	// is false when the topic is not replicated here (a local topic of this node): the
	// caller removes it as any other.
	RemoveReplicated(r Request, stored string, f *wire.TopicRemove) (records uint64, ok bool, e *wire.Error)
	// Owner is the node of the region that serves topic stored: "" for this node.
	Owner(ctx context.Context, stored string) (string, *wire.Error)
	// AskRegion sends req to every other live node of the region and hands each answer
	// frame to fn; a node that cannot be asked fails it (CodeUnavailable).
	AskRegion(ctx context.Context, req wire.Frame, fn func(wire.Frame) error) *wire.Error
	// AskNode sends req to node and hands each answer frame to fn until the end; an ERROR
	// answer comes back as it is, a failure to ask as CodeUnavailable.
	AskNode(ctx context.Context, node string, req wire.Frame, fn func(wire.Frame) error) *wire.Error
	// Replicated reports whether the region replicates its topics, and its name.
	Replicated() (region string, ok bool)
}

// Request is who asks for an operation and how it came: a client's (over a management
// stream), a peer's (passed on by another node of the region: Peer, From its name) or the
// operator's (the admin API).
type Request struct {
	Ctx  context.Context
	A    *auth.Principal
	Peer bool
	From string
}

// Manager runs management requests. With Region set, a topic operation goes to the topic's
// owner and a consumer operation to every live node of the region, since a durable's
// positions are stored on the owners of its topics; without it, they act on Local alone
// (a single node, or a request a peer passed on).
type Manager struct {
	Request
	Local  Local
	Region bool
}

// stored checks a consumer name as the principal gives it and maps it into the node's
// namespace.
func (m *Manager) stored(name string) (string, *wire.Error) {
	// A peer or an operator names a tenant's consumer with its prefix.
	namespaced := m.Peer || m.A.Tenant == ""
	if !auth.ValidConsumerName(name, namespaced) || strings.HasPrefix(name, federation.CursorPrefix) {
		return "", wire.Errorf(wire.CodeInvalidArgument, "consumer name %q: want 1-255 characters of [A-Za-z0-9_.-]", name)
	}
	return m.A.Durable(name), nil
}

// Consumers lists the principal's consumers (name empty) or finds one.
func (m *Manager) Consumers(name string) ([]Consumer, *wire.Error) {
	if name == "" {
		return m.gather("")
	}
	name, e := m.stored(name)
	if e != nil {
		return nil, e
	}
	cs, e := m.gather(name)
	if e == nil {
		e = Ambiguous(m.A, cs)
	}
	return cs, e
}

// gather is Local.Consumers over this node and, in a region, its other live nodes, merged
// by name (name stored, or empty for all).
func (m *Manager) gather(name string) ([]Consumer, *wire.Error) {
	local, e := m.Local.Consumers(m.A, name)
	if !m.Region {
		return local, e
	}
	if e != nil && e.Code != wire.CodeNotFound {
		return nil, e
	}
	mg := merger{merged: make(map[string]*Consumer), liveRow: make(map[string]map[string]bool)}
	for _, c := range local {
		mg.add(c)
	}
	prefix := auth.ConsumerPrefix(m.A)
	err := m.Local.AskRegion(m.Ctx, &wire.Consumers{Name: name}, func(f wire.Frame) error {
		ci, ok := f.(*wire.ConsumerInfo)
		if !ok {
			return fmt.Errorf("unexpected %s in a consumer listing", f.Type())
		}
		if strings.HasPrefix(ci.Name, prefix) && !strings.HasPrefix(ci.Name, federation.CursorPrefix) {
			mg.add(FromPeer(ci))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return Finish(m.A, name, mg.merged, "in this region")
}

// merger merges the nodes' listings of consumers by Key. A replicated topic's consumer
// state is on each of its replicas: a consumer's row of a topic is counted once, from the
// node where the consumer is live (its members there, a group's live state), else the one
// stored last. liveRow says, per consumer and topic, whether its row came from a node where
// the consumer is live.
type merger struct {
	merged  map[string]*Consumer
	liveRow map[string]map[string]bool
}

func (mg *merger) add(c Consumer) {
	key := Key(c.Kind, c.Name)
	o := mg.merged[key]
	if o == nil {
		o = &Consumer{Name: c.Name, Kind: c.Kind, Pattern: c.Pattern}
		if c.Group != nil {
			g := *c.Group
			g.Outstanding = 0
			o.Group = &g
		}
		mg.merged[key] = o
		mg.liveRow[key] = make(map[string]bool)
	}
	o.Members += c.Members
	if c.LastAck.After(o.LastAck) {
		o.LastAck = c.LastAck
	}
	if o.Pattern == "" {
		o.Pattern = c.Pattern
	}
	if len(c.Topics) == 0 {
		// An older peer's listing carries no rows: its figures are added as they are.
		o.Pending += c.Pending
		if c.Group != nil && o.Group != nil {
			o.Group.Outstanding += c.Group.Outstanding
		}
		return
	}
	live := c.Members > 0
	for _, t := range c.Topics {
		i := slices.IndexFunc(o.Topics, func(x wire.ConsumerTopic) bool { return x.Topic == t.Topic })
		if i < 0 {
			o.Topics = append(o.Topics, t)
			i = len(o.Topics) - 1
		} else if was := mg.liveRow[key][t.Topic]; was && !live || was == live && t.Updated <= o.Topics[i].Updated {
			continue
		} else {
			o.Pending -= o.Topics[i].Pending
			if o.Group != nil {
				o.Group.Outstanding -= o.Outstanding[t.Topic]
			}
			o.Topics[i] = t
		}
		mg.liveRow[key][t.Topic] = live
		o.Pending += t.Pending
		if c.Group != nil && o.Group != nil {
			if o.Outstanding == nil {
				o.Outstanding = make(map[string]uint64)
			}
			o.Outstanding[t.Topic] = c.Outstanding[t.Topic]
			o.Group.Outstanding += c.Outstanding[t.Topic]
		}
	}
}

// Reset moves every position of a consumer to where kind and value say.
func (m *Manager) Reset(name string, kind wire.StartKind, value uint64, force bool) (Consumer, *wire.Error) {
	name, e := m.stored(name)
	if e != nil {
		return Consumer{}, e
	}
	if !m.Region {
		return m.Local.ResetConsumer(m.Ctx, m.A, name, kind, value, force)
	}
	if e := m.checkRegionMembers(name, "reset", force); e != nil {
		return Consumer{}, e
	}
	if _, e := m.Local.ResetConsumer(m.Ctx, m.A, name, kind, value, true); e != nil && e.Code != wire.CodeNotFound {
		return Consumer{}, e
	}
	// Members were checked region-wide: the other nodes end any that came since.
	req := &wire.ConsumerReset{Name: name, Start: kind, StartValue: value, Flags: wire.ManageForce}
	if e := m.Local.AskRegion(m.Ctx, req, func(wire.Frame) error { return nil }); e != nil {
		return Consumer{}, e
	}
	cs, e := m.gather(name)
	if e != nil {
		return Consumer{}, e
	}
	return cs[0], nil
}

// Remove deletes a consumer and returns how many positions it had.
func (m *Manager) Remove(name string, force bool) (int, *wire.Error) {
	name, e := m.stored(name)
	if e != nil {
		return 0, e
	}
	if !m.Region {
		return m.Local.DeleteConsumer(m.Ctx, m.A, name, force)
	}
	if e := m.checkRegionMembers(name, "remove", force); e != nil {
		return 0, e
	}
	removed, e := m.Local.DeleteConsumer(m.Ctx, m.A, name, true)
	if e != nil && e.Code != wire.CodeNotFound {
		return 0, e
	}
	e = m.Local.AskRegion(m.Ctx, &wire.ConsumerDelete{Name: name, Flags: wire.ManageForce}, func(f wire.Frame) error {
		if d, ok := f.(*wire.Done); ok {
			removed += int(d.Count)
		}
		return nil
	})
	return removed, e
}

// checkRegionMembers finds the consumer on the region's nodes and refuses, unless forced,
// while it has members on any of them.
func (m *Manager) checkRegionMembers(name, op string, force bool) *wire.Error {
	cs, e := m.gather(name)
	if e != nil {
		return e
	}
	if e := Ambiguous(m.A, cs); e != nil && op != "remove" {
		return e
	}
	for _, c := range cs {
		if e := m.Local.CheckMembers(m.Ctx, m.A, Consumer{Name: name, Kind: c.Kind, Members: c.Members}, op, force); e != nil {
			return e
		}
	}
	return nil
}

// topicTarget checks a topic request's topic for the principal and finds where it is
// served: "" for this node, else the owner's name. stored is the topic in the node's
// namespace.
func (m *Manager) topicTarget(topic string) (stored, owner string, e *wire.Error) {
	if e := m.A.CheckTopic(topic, false); e != nil {
		return "", "", e
	}
	if e := m.A.MayPublish(topic); e != nil {
		return "", "", e
	}
	stored = m.A.Topic(topic)
	if m.Region {
		if owner, e = m.Local.Owner(m.Ctx, stored); e != nil {
			return "", "", e
		}
	}
	return stored, owner, nil
}

// CreateTopic creates a topic, or changes its configuration (ManageUpdate), and returns its
// TOPIC_INFO in the principal's view.
func (m *Manager) CreateTopic(f *wire.TopicCreate) (wire.TopicInfo, *wire.Error) {
	if region, ok := m.Local.Replicated(); f.Replicas > 1 && !ok {
		return wire.TopicInfo{}, wire.Errorf(wire.CodeInvalidArgument,
			"topic %q: %d replicas asked, but region %q does not replicate topics (its nodes run with --replicas 1): every topic has one copy per region",
			f.Topic, f.Replicas, region)
	}
	stored, owner, e := m.topicTarget(f.Topic)
	if e != nil {
		return wire.TopicInfo{}, e
	}
	var info wire.TopicInfo
	if owner != "" {
		c := *f
		c.Topic = stored
		e = m.Local.AskNode(m.Ctx, owner, &c, func(fr wire.Frame) error {
			ti, ok := fr.(*wire.TopicInfo)
			if !ok {
				return fmt.Errorf("unexpected %s in the answer to TOPIC_CREATE", fr.Type())
			}
			info = *ti
			return nil
		})
	} else {
		cfg := wal.TopicConfig{RetentionSet: f.Flags&wire.ManageRetention != 0}
		if cfg.RetentionSet {
			if f.MaxAge > 1<<63-1 || f.MaxBytes > 1<<63-1 {
				return wire.TopicInfo{}, wire.Errorf(wire.CodeInvalidArgument, "retention of topic %q: max age %d ns or max bytes %d out of range", f.Topic, f.MaxAge, f.MaxBytes)
			}
			cfg.Retention = wal.Retention{MaxAge: time.Duration(f.MaxAge), MaxBytes: int64(f.MaxBytes)}
		}
		info, e = m.Local.CreateTopic(m.Ctx, m.A, stored, cfg, f.Flags&wire.ManageUpdate != 0)
	}
	info.Name = m.A.ClientName(info.Name)
	return info, e
}

// RemoveTopic purges or deletes a topic and returns the records deleted.
func (m *Manager) RemoveTopic(f *wire.TopicRemove) (uint64, *wire.Error) {
	if f.Op != wire.RemovePurge && f.Op != wire.RemoveDelete {
		return 0, wire.Errorf(wire.CodeInvalidArgument, "TOPIC_REMOVE operation %d: want 1 (purge) or 2 (delete)", f.Op)
	}
	if _, ok := m.Local.Replicated(); ok {
		// A replicated region: the topic's group cuts it.
		if e := m.A.CheckTopic(f.Topic, false); e != nil {
			return 0, e
		}
		if e := m.A.MayPublish(f.Topic); e != nil {
			return 0, e
		}
		if records, ok, e := m.Local.RemoveReplicated(m.Request, m.A.Topic(f.Topic), f); ok {
			return records, e
		}
	}
	stored, owner, e := m.topicTarget(f.Topic)
	if e != nil {
		return 0, e
	}
	if owner == "" {
		return m.Local.RemoveTopic(m.Ctx, m.A, stored, f.Op, f.Flags&wire.ManageForce != 0)
	}
	return m.RelayRemove(owner, stored, f)
}

// TopicInfo is the TOPIC_INFO of a topic of this node's log (node names).
func TopicInfo(t wal.TopicInfo) wire.TopicInfo {
	ti := wire.TopicInfo{Name: t.Name, First: t.First, Next: t.Next, Bytes: uint64(max(t.Bytes, 0))}
	if t.Config.RetentionSet {
		ti.RetentionSet = true
		ti.RetentionAge = uint64(max(t.Config.Retention.MaxAge, 0))
		ti.RetentionBytes = uint64(max(t.Config.Retention.MaxBytes, 0))
	}
	return ti
}

// RelayRemove passes a TOPIC_REMOVE of topic stored on to node and returns its answer.
func (m *Manager) RelayRemove(node, stored string, f *wire.TopicRemove) (uint64, *wire.Error) {
	c := *f
	c.Topic = stored
	var records uint64
	e := m.Local.AskNode(m.Ctx, node, &c, func(fr wire.Frame) error {
		d, ok := fr.(*wire.Done)
		if !ok {
			return fmt.Errorf("unexpected %s in the answer to TOPIC_REMOVE", fr.Type())
		}
		records = d.Count
		return nil
	})
	return records, e
}
