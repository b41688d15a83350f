package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"
	"github.com/quicmq/quicmq/wal"
)

// manage serves a management stream (docs/protocol.md "Management streams"): one request
// frame, answered by CONSUMER_INFO, TOPIC_INFO or DONE frames and FIN, or by ERROR.
func (s *session) manage(str *quic.Stream, req wire.Frame) {
	m := &manager{n: s.n, ctx: s.ctx, a: s.actor, peer: s.peer, from: s.peerName, region: s.n.place != nil && !s.peer}
	w := wire.NewWriter(str)
	var e *wire.Error
	switch f := req.(type) {
	case *wire.Consumers:
		var cs []consumerState
		if cs, e = m.consumers(f.Name); e == nil {
			for _, c := range cs {
				// A peer gets the rows of a listing too: the node that asked counts each
				// topic's row once (gather), which summed figures cannot tell.
				if w.Write(c.info(s.actor, f.Name != "" || s.peer)) != nil {
					return
				}
			}
		}
	case *wire.ConsumerReset:
		var c consumerState
		if c, e = m.reset(f.Name, f.Start, f.StartValue, f.Flags&wire.ManageForce != 0); e == nil {
			w.Write(c.info(s.actor, true))
		}
	case *wire.ConsumerDelete:
		var removed int
		if removed, e = m.remove(f.Name, f.Flags&wire.ManageForce != 0); e == nil {
			w.Write(&wire.Done{Count: uint64(removed)})
		}
	case *wire.TopicCreate:
		var ti wire.TopicInfo
		if ti, e = m.createTopic(f); e == nil {
			w.Write(topicInfoFor(s.version, &ti))
		}
	case *wire.TopicRemove:
		var records uint64
		if records, e = m.removeTopic(f); e == nil {
			w.Write(&wire.Done{Count: records})
		}
	}
	if e != nil {
		s.failStream(str, e)
		return
	}
	w.Flush()
	str.Close() // the client closed its side after the request
}

// manager runs management requests for a principal: a client's (over a management stream),
// a peer's (passed on by another node of the region: served from this node's log alone) or
// the operator's (the admin API). With region set, a topic operation goes to the topic's
// owner and a consumer operation to every live node of the region, since a durable's
// positions are stored on the owners of its topics.
type manager struct {
	n      *Node
	ctx    context.Context
	a      *auth.Principal
	peer   bool
	from   string // the peer node's name, for a peer's request
	region bool
}

// stored checks a consumer name as the principal gives it and maps it into the node's
// namespace.
func (m *manager) stored(name string) (string, *wire.Error) {
	ok := durableRE.MatchString
	if m.peer || m.a.Tenant == "" {
		ok = peerDurableRE.MatchString // a peer or an operator names a tenant's consumer with its prefix
	}
	if !ok(name) || strings.HasPrefix(name, mirrorCursorPrefix) {
		return "", wire.Errorf(wire.CodeInvalidArgument, "consumer name %q: want 1-255 characters of [A-Za-z0-9_.-]", name)
	}
	return m.a.Durable(name), nil
}

// consumers lists the principal's consumers (name empty) or finds one.
func (m *manager) consumers(name string) ([]consumerState, *wire.Error) {
	if name == "" {
		return m.gather("")
	}
	name, e := m.stored(name)
	if e != nil {
		return nil, e
	}
	cs, e := m.gather(name)
	if e == nil {
		e = ambiguous(m.a, cs)
	}
	return cs, e
}

// gather is n.consumers over this node and, in a region, its other live nodes, merged by
// name (name stored, or empty for all).
func (m *manager) gather(name string) ([]consumerState, *wire.Error) {
	n, a := m.n, m.a
	local, e := n.consumers(a, name)
	if !m.region {
		return local, e
	}
	if e != nil && e.Code != wire.CodeNotFound {
		return nil, e
	}
	merged := make(map[string]*consumerState)
	// A replicated topic's consumer state is on each of its replicas: a consumer's row of a
	// topic is counted once, from the node where the consumer is live (its members there,
	// a group's live state), else the one stored last. liveRow says where each came from.
	liveRow := make(map[string]map[string]bool)
	add := func(c consumerState) {
		key := consumerKey(c.kind, c.name)
		o := merged[key]
		if o == nil {
			o = &consumerState{name: c.name, kind: c.kind, pattern: c.pattern}
			if c.group != nil {
				g := *c.group
				g.Outstanding = 0
				o.group = &g
			}
			merged[key] = o
			liveRow[key] = make(map[string]bool)
		}
		o.members += c.members
		if c.lastAck.After(o.lastAck) {
			o.lastAck = c.lastAck
		}
		if o.pattern == "" {
			o.pattern = c.pattern
		}
		if len(c.topics) == 0 {
			// An older peer's listing carries no rows: its figures are added as they are.
			o.pending += c.pending
			if c.group != nil && o.group != nil {
				o.group.Outstanding += c.group.Outstanding
			}
			return
		}
		live := c.members > 0
		for _, t := range c.topics {
			i := slices.IndexFunc(o.topics, func(x wire.ConsumerTopic) bool { return x.Topic == t.Topic })
			if i < 0 {
				o.topics = append(o.topics, t)
				i = len(o.topics) - 1
			} else if was := liveRow[key][t.Topic]; was && !live || was == live && t.Updated <= o.topics[i].Updated {
				continue
			} else {
				o.pending -= o.topics[i].Pending
				if o.group != nil {
					o.group.Outstanding -= o.outstanding[t.Topic]
				}
				o.topics[i] = t
			}
			liveRow[key][t.Topic] = live
			o.pending += t.Pending
			if c.group != nil && o.group != nil {
				if o.outstanding == nil {
					o.outstanding = make(map[string]uint64)
				}
				o.outstanding[t.Topic] = c.outstanding[t.Topic]
				o.group.Outstanding += c.outstanding[t.Topic]
			}
		}
	}
	for _, c := range local {
		add(c)
	}
	prefix := auth.ConsumerPrefix(a)
	err := n.askRegion(m.ctx, &wire.Consumers{Name: name}, func(f wire.Frame) error {
		ci, ok := f.(*wire.ConsumerInfo)
		if !ok {
			return fmt.Errorf("unexpected %s in a consumer listing", f.Type())
		}
		if strings.HasPrefix(ci.Name, prefix) && !strings.HasPrefix(ci.Name, mirrorCursorPrefix) {
			add(stateOf(ci))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return finishConsumers(a, name, merged, "in this region")
}

// stateOf is a peer's CONSUMER_INFO (node names) as a consumerState.
func stateOf(ci *wire.ConsumerInfo) consumerState {
	c := consumerState{name: ci.Name, kind: ci.Kind, pattern: ci.Pattern, pending: ci.Pending, members: int(ci.Members), topics: ci.Topics}
	if c.kind == "" {
		c.kind = wire.KindDurable
	}
	if ci.LastAck != 0 {
		c.lastAck = time.Unix(0, ci.LastAck)
	}
	c.groupFromPeer(ci)
	return c
}

// reset moves every position of a consumer to where kind and value say.
func (m *manager) reset(name string, kind wire.StartKind, value uint64, force bool) (consumerState, *wire.Error) {
	name, e := m.stored(name)
	if e != nil {
		return consumerState{}, e
	}
	if !m.region {
		return m.n.resetConsumer(m.ctx, m.a, name, kind, value, force)
	}
	if e := m.checkRegionMembers(name, "reset", force); e != nil {
		return consumerState{}, e
	}
	if _, e := m.n.resetConsumer(m.ctx, m.a, name, kind, value, true); e != nil && e.Code != wire.CodeNotFound {
		return consumerState{}, e
	}
	// Members were checked region-wide: the other nodes end any that came since.
	req := &wire.ConsumerReset{Name: name, Start: kind, StartValue: value, Flags: wire.ManageForce}
	if e := m.n.askRegion(m.ctx, req, func(wire.Frame) error { return nil }); e != nil {
		return consumerState{}, e
	}
	cs, e := m.gather(name)
	if e != nil {
		return consumerState{}, e
	}
	return cs[0], nil
}

// remove deletes a consumer and returns how many positions it had.
func (m *manager) remove(name string, force bool) (int, *wire.Error) {
	name, e := m.stored(name)
	if e != nil {
		return 0, e
	}
	if !m.region {
		return m.n.deleteConsumer(m.ctx, m.a, name, force)
	}
	if e := m.checkRegionMembers(name, "remove", force); e != nil {
		return 0, e
	}
	removed, e := m.n.deleteConsumer(m.ctx, m.a, name, true)
	if e != nil && e.Code != wire.CodeNotFound {
		return 0, e
	}
	e = m.n.askRegion(m.ctx, &wire.ConsumerDelete{Name: name, Flags: wire.ManageForce}, func(f wire.Frame) error {
		if d, ok := f.(*wire.Done); ok {
			removed += int(d.Count)
		}
		return nil
	})
	return removed, e
}

// checkRegionMembers finds the consumer on the region's nodes and refuses, unless forced,
// while it has members on any of them.
func (m *manager) checkRegionMembers(name, op string, force bool) *wire.Error {
	cs, e := m.gather(name)
	if e != nil {
		return e
	}
	if e := ambiguous(m.a, cs); e != nil && op != "remove" {
		return e
	}
	for _, c := range cs {
		if e := m.n.checkMembers(m.ctx, m.a, consumerState{name: name, kind: c.kind, members: c.members}, op, force); e != nil {
			return e
		}
	}
	return nil
}

// topicTarget checks a topic request's topic for the principal and finds where it is
// served: "" for this node, else the owner's name. stored is the topic in the node's
// namespace.
func (m *manager) topicTarget(topic string) (stored, owner string, e *wire.Error) {
	if e := m.a.CheckTopic(topic, false); e != nil {
		return "", "", e
	}
	if e := m.a.MayPublish(topic); e != nil {
		return "", "", e
	}
	stored = m.a.Topic(topic)
	if m.region {
		o, e := m.n.place.Owner(m.ctx, stored)
		if e != nil {
			return "", "", e
		}
		if o != m.n.cfg.Name {
			owner = o
		}
	}
	return stored, owner, nil
}

// createTopic creates a topic, or changes its configuration (ManageUpdate), and returns its
// TOPIC_INFO in the principal's view.
func (m *manager) createTopic(f *wire.TopicCreate) (wire.TopicInfo, *wire.Error) {
	if f.Replicas > 1 && m.n.rep == nil {
		return wire.TopicInfo{}, wire.Errorf(wire.CodeInvalidArgument,
			"topic %q: %d replicas asked, but region %q does not replicate topics (its nodes run with --replicas 1): every topic has one copy per region",
			f.Topic, f.Replicas, m.n.cfg.Region)
	}
	stored, owner, e := m.topicTarget(f.Topic)
	if e != nil {
		return wire.TopicInfo{}, e
	}
	var info wire.TopicInfo
	if owner != "" {
		c := *f
		c.Topic = stored
		e = m.n.askNode(m.ctx, owner, &c, func(fr wire.Frame) error {
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
		var ti wal.TopicInfo
		if ti, e = m.n.createTopic(m.ctx, m.a, stored, cfg, f.Flags&wire.ManageUpdate != 0); e == nil {
			// Every field, as a listing's row has (protocol.md: one rule for both answers).
			info = topicInfo(ti)
			info.Leader, info.Replicas = m.n.topicHolders(ti.Name)
		}
	}
	info.Name = m.a.ClientName(info.Name)
	return info, e
}

// removeTopic purges or deletes a topic and returns the records deleted.
func (m *manager) removeTopic(f *wire.TopicRemove) (uint64, *wire.Error) {
	if f.Op != wire.RemovePurge && f.Op != wire.RemoveDelete {
		return 0, wire.Errorf(wire.CodeInvalidArgument, "TOPIC_REMOVE operation %d: want 1 (purge) or 2 (delete)", f.Op)
	}
	if m.n.rep != nil {
		// A replicated region: the topic's group cuts it (replretain.go).
		if e := m.a.CheckTopic(f.Topic, false); e != nil {
			return 0, e
		}
		if e := m.a.MayPublish(f.Topic); e != nil {
			return 0, e
		}
		if records, ok, e := m.removeReplicated(m.a.Topic(f.Topic), f); ok {
			return records, e
		}
	}
	stored, owner, e := m.topicTarget(f.Topic)
	if e != nil {
		return 0, e
	}
	if owner == "" {
		return m.n.removeTopic(m.ctx, m.a, stored, f.Op, f.Flags&wire.ManageForce != 0)
	}
	return m.relayRemove(owner, stored, f) // replretain.go
}

// topicInfo is the TOPIC_INFO of a topic of this node's log (node names).
func topicInfo(t wal.TopicInfo) wire.TopicInfo {
	ti := wire.TopicInfo{Name: t.Name, First: t.First, Next: t.Next, Bytes: uint64(max(t.Bytes, 0))}
	if t.Config.RetentionSet {
		ti.RetentionSet = true
		ti.RetentionAge = uint64(max(t.Config.Retention.MaxAge, 0))
		ti.RetentionBytes = uint64(max(t.Config.Retention.MaxBytes, 0))
	}
	return ti
}

// askRegion sends req to every other live node of the region and hands each answer frame to
// fn. A node that cannot be asked fails the request (CodeUnavailable): a consumer's state
// there would be missed or left unchanged.
func (n *Node) askRegion(ctx context.Context, req wire.Frame, fn func(wire.Frame) error) *wire.Error {
	for _, m := range n.place.Members() {
		if m.Name == n.cfg.Name || m.Status != gossip.StatusAlive {
			continue
		}
		if e := n.askNode(ctx, m.Name, req, fn); e != nil && e.Code != wire.CodeNotFound {
			return e
		}
	}
	return nil
}

// askNode sends req to node over its link and hands each answer frame to fn until FIN. An
// ERROR answer is returned as it is; a failure to ask is CodeUnavailable.
func (n *Node) askNode(ctx context.Context, node string, req wire.Frame, fn func(wire.Frame) error) *wire.Error {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ManageTimeout)
	defer cancel()
	err := n.streamTo(ctx, node, req, fn)
	var we *wire.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &we):
		return we
	}
	return wire.Errorf(wire.CodeUnavailable, "node %q of this region could not be asked (%s): %v", node, req.Type(), err)
}

// streamTo opens a stream to node, sends req, closes its side and reads the answer frames
// to the end; an ERROR frame comes back as a *wire.Error.
func (n *Node) streamTo(ctx context.Context, node string, req wire.Frame, fn func(wire.Frame) error) error {
	str, err := n.fed.OpenStreamTo(ctx, node)
	if err != nil {
		return err
	}
	defer str.CancelRead(wire.AppCancelled)
	stop := context.AfterFunc(ctx, func() { str.CancelRead(wire.AppCancelled) })
	defer stop()
	if _, err := str.Write(wire.Append(nil, req)); err != nil {
		return err
	}
	str.Close()
	r := wire.NewReader(str, wire.Limits{})
	for {
		f, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if ef, ok := f.(*wire.ErrorFrame); ok {
			return ef.AsError()
		}
		if err := fn(f); err != nil {
			return err
		}
	}
}
