package manage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"
	"github.com/quicmq/quicmq/node/groups"
	"github.com/quicmq/quicmq/replica"
	"github.com/quicmq/quicmq/routing"
	"github.com/quicmq/quicmq/wal"
)

// This node's consumer groups in management (Here; here_consumers.go for durables): a group
// is listed, inspected, reset and removed like a durable consumer, as a row of kind "group",
// from its state in wal (wal.Groups: settings, and per topic the floor, the next offset and
// the outstanding records) and its members connected to this node (the live group,
// node/groups).
//
// A group's state of a replicated topic is replicated state (node/grouprepl.go): a reset or
// removal of it is a set group entry of the topic's raft group (HereConfig.SetGroup),
// proposed by the node the request came to (and by the node serving the group, whose
// members a forced one ends), so that every replica, one down meanwhile too, ends with the
// same state.
//
// A reset or removal fences the group's name (LiveGroups.Fence): no member joins while it
// runs, so the live group's state, which its members store after every run of ACKs, can
// never overwrite what the operation wrote. A forced one ends the members (their own
// stream's ERROR 21) and waits until the live group has ended, after its members' last
// stores.

// groupConsumers adds to cs the groups of a on this node: every one (name empty) or the one
// called name (stored). A group is listed from its stored state, overlaid with its live
// state where it is live here (Group.LiveState), so a group whose members hold records they
// have not acknowledged yet, and so have stored nothing, is listed as it is now.
func (h *Here) groupConsumers(a *auth.Principal, name string, cs map[string]*Consumer) error {
	prefix := auth.ConsumerPrefix(a)
	if name != "" {
		prefix = name
	}
	err := h.cfg.Wal.Groups(prefix, func(g wal.GroupInfo) bool {
		if groups.IsMirroredGroup(g.Name) { // another region's, kept for a failover (node/groups/vector.go)
			return true
		}
		if name == "" || g.Name == name {
			c := h.groupState(g)
			cs[Key(c.Kind, c.Name)] = c
		}
		return true
	})
	if err != nil {
		return err
	}
	// Live groups that stored nothing yet.
	for _, g := range h.cfg.Groups.All() {
		if !strings.HasPrefix(g.Name(), prefix) || groups.IsMirroredGroup(g.Name()) || name != "" && g.Name() != name {
			continue
		}
		if _, ok := cs[Key(wire.KindGroup, g.Name())]; !ok {
			c := h.groupState(wal.GroupInfo{Name: g.Name(), Settings: g.Settings(), HasSettings: true})
			cs[Key(c.Kind, c.Name)] = c
		}
	}
	return nil
}

// groupState is a group as a consumer: per topic, Resume is its floor and Pending the
// records not yet acknowledged, those never handed out (head - next) and those handed out
// and not done (outstanding); records retention deleted count for neither. Where the group
// is live on this node its live state of a topic stands for the stored one.
func (h *Here) groupState(g wal.GroupInfo) *Consumer {
	c := &Consumer{Name: g.Name, Kind: wire.KindGroup, Pattern: g.Settings.Pattern,
		Group: &wire.ConsumerGroup{AckWait: uint64(max(g.Settings.AckWait, 0)), MaxDeliver: g.Settings.MaxDeliver,
			DeadLetter: g.Settings.DeadLetter, Order: g.Settings.Order},
		Outstanding: make(map[string]uint64, len(g.States))}
	var live map[string]groups.TopicState
	if lg := h.cfg.Groups.Group(g.Name); lg != nil {
		live = lg.LiveState()
	}
	row := func(topic string, floor, next uint64, outstanding []uint64, updated time.Time) {
		first, head, ok := h.cfg.Wal.Bounds(topic)
		if !ok {
			first, head = floor, next
		}
		lo := max(floor, first)
		var out uint64
		for _, off := range outstanding {
			if off >= lo {
				out++
			}
		}
		var fresh uint64
		if from := max(next, first); head > from {
			fresh = head - from
		}
		c.Outstanding[topic] = out
		c.Group.Outstanding += out
		c.Pending += fresh + out
		c.Topics = append(c.Topics, wire.ConsumerTopic{Topic: topic, Resume: floor, Next: head, Pending: fresh + out, Updated: UnixNano(updated)})
		if updated.After(c.LastAck) {
			c.LastAck = updated
		}
	}
	for topic, st := range g.States {
		if lt, ok := live[topic]; ok {
			row(topic, lt.Floor, lt.Next, lt.Out, st.Updated)
			delete(live, topic)
			continue
		}
		offs := make([]uint64, len(st.Entries))
		for i, e := range st.Entries {
			offs[i] = e.Offset
		}
		row(topic, st.Floor, st.Next, offs, st.Updated)
	}
	for topic, lt := range live { // not stored yet
		row(topic, lt.Floor, lt.Next, lt.Out, time.Time{})
	}
	h.unreadTopics(g, c.Outstanding, row)
	c.Members = h.groupMembers(g.Name)
	return c
}

// unreadTopics lists with row the topics of this node's log that group g follows and has no
// state of (neither stored nor live): a group with a stored start stores a state of a topic
// only once it hands out a record of it (node/groups: lazy), so the others are at the group's
// start, their pending records counted from there. listed holds the topics listed already.
func (h *Here) unreadTopics(g wal.GroupInfo, listed map[string]uint64, row func(topic string, floor, next uint64, outstanding []uint64, updated time.Time)) {
	if g.Settings.Start.Kind == wal.GroupStartUnknown {
		return // a state of every topic it follows is stored
	}
	m, err := routing.NewMatcher(g.Settings.Pattern)
	if err != nil {
		return
	}
	for _, ti := range h.cfg.Wal.Topics() {
		if _, ok := listed[ti.Name]; ok || !m.Match(ti.Name) || !h.cfg.Wal.IsLocal(ti.Name) {
			continue
		}
		if start, ok := h.cfg.Wal.StartOf(ti.Name, g.Settings.Start); ok {
			row(ti.Name, start, start, nil, time.Time{})
		}
	}
}

// groupMembers counts the members of group name (stored) connected to this node now.
func (h *Here) groupMembers(name string) int {
	g := h.cfg.Groups.Group(name)
	if g == nil {
		return 0
	}
	return g.MemberCount()
}

// endGroup ends the members of group name (stored) on this node with e and waits until the
// live group has ended: after every member's last store.
func (h *Here) endGroup(ctx context.Context, name string, e *wire.Error) *wire.Error {
	g := h.cfg.Groups.Group(name)
	if g == nil {
		return nil
	}
	g.EndMembers(e)
	select {
	case <-g.Ended():
		return nil
	case <-ctx.Done():
		return wire.Errorf(wire.CodeUnavailable, "group %q: its members did not end: %v", g.Shown(), ctx.Err())
	}
}

// resetGroup puts group c at start on each of its topics: a new floor and next offset, and
// an empty window (the outstanding set is cleared in the same batch). Records handed out
// before are delivered again if the reset moved before them.
func (h *Here) resetGroup(ctx context.Context, a *auth.Principal, c Consumer, start wal.Start, force bool) *wire.Error {
	unfence, e := h.cfg.Groups.Fence(c.Name, "reset")
	if e != nil {
		return e
	}
	defer unfence()
	c.Members = h.groupMembers(c.Name) // now that none can join
	propose := h.proposesGroupOp(a, c.Name)
	if e := h.CheckMembers(ctx, a, c, "reset", force); e != nil {
		return e
	}
	states := make(map[string]*wal.GroupState, len(c.Topics))
	for _, t := range c.Topics {
		off, err := h.cfg.Wal.ResolveStart(t.Topic, start)
		if errors.Is(err, wal.ErrUnknownTopic) || errors.Is(err, wal.ErrTopicDeleted) {
			continue // no records left to put it before
		}
		if err != nil {
			return walErr(err)
		}
		states[t.Topic] = &wal.GroupState{Floor: off, Next: off}
	}
	for topic, st := range states {
		if h.cfg.ReplicatedGroupTopic(topic) {
			delete(states, topic)
			if propose {
				if e := h.cfg.SetGroup(ctx, c.Name, topic, &replica.GroupOp{State: st}); e != nil {
					return e
				}
			}
		}
	}
	if err := h.cfg.Wal.SetGroup(ctx, c.Name, nil, states); err != nil {
		return walErr(err)
	}
	return nil
}

// removeGroup removes group c (its settings and every topic's state) and returns how many
// topic states it had.
func (h *Here) removeGroup(ctx context.Context, a *auth.Principal, c Consumer, force bool) (int, *wire.Error) {
	unfence, e := h.cfg.Groups.Fence(c.Name, "removed")
	if e != nil {
		return 0, e
	}
	defer unfence()
	c.Members = h.groupMembers(c.Name)
	propose := h.proposesGroupOp(a, c.Name)
	if e := h.CheckMembers(ctx, a, c, "remove", force); e != nil {
		return 0, e
	}
	// A replicated topic's state (and the settings with it) is removed through its raft
	// group, before anything here: a removal that does not commit leaves every replica as it
	// was. The removed states are counted once in the region, by the node that proposed.
	removed := 0
	for _, t := range c.Topics {
		if !h.cfg.ReplicatedGroupTopic(t.Topic) {
			removed++
			continue
		}
		if propose {
			if e := h.cfg.SetGroup(ctx, c.Name, t.Topic, &replica.GroupOp{Remove: true}); e != nil {
				return 0, e
			}
			removed++
		}
	}
	if _, _, err := h.cfg.Wal.DeleteGroup(ctx, c.Name); err != nil {
		return 0, walErr(err)
	}
	return removed, nil
}

// proposesGroupOp reports whether this node proposes a reset or removal of group name's
// replicated states: the node the request came to does, and so does a node it is passed on
// to that serves the group (a forced operation ends its members there, and their last
// stores, proposed meanwhile, must not outlive it). Called before the members are ended.
func (h *Here) proposesGroupOp(a *auth.Principal, name string) bool {
	return a != auth.PeerActor || h.cfg.Groups.Group(name) != nil
}

// groupDependents names the groups with state on topic, or live on this node and following
// it, as a sees them.
func (h *Here) groupDependents(a *auth.Principal, topic string) []string {
	names := make(map[string]bool)
	err := h.cfg.Wal.Groups("", func(g wal.GroupInfo) bool {
		if g.States[topic] != nil && !groups.IsMirroredGroup(g.Name) {
			names[g.Name] = true
		}
		return true
	})
	if err != nil {
		h.cfg.Log.Warn("listing the groups of a topic failed", "topic", topic, "err", err)
	}
	for _, g := range h.cfg.Groups.All() {
		if g.Follows(topic) {
			names[g.Name()] = true
		}
	}
	deps := make([]string, 0, len(names))
	for name := range names {
		deps = append(deps, fmt.Sprintf("consumer group %q", a.ConsumerView(name)))
	}
	slices.Sort(deps)
	return deps
}
