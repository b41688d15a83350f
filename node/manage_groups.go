package node

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
	"github.com/quicmq/quicmq/node/manage"
	"github.com/quicmq/quicmq/replica"
	"github.com/quicmq/quicmq/routing"
	"github.com/quicmq/quicmq/wal"
)

// Shared groups in consumer management (manage.go): a group is listed, inspected, reset and
// removed like a durable consumer, as a row of kind "group", from its state in wal
// (wal.Groups: settings, and per topic the floor, the next offset and the outstanding records) and its
// members connected to this node (the live group, group.go).
//
// A group's state of a replicated topic is replicated state (grouprepl.go): a reset or
// removal of it is a set group entry of the topic's raft group, proposed by the node the
// request came to (and by the node serving the group, whose members a forced one ends), so
// that every replica, one down meanwhile too, ends with the same state.
//
// A reset or removal fences the group's name (consumers.mu.fenced): no member joins while it
// runs, so the live group's state, which its members store after every run of ACKs, can
// never overwrite what the operation wrote. A forced one ends the members (their own
// stream's ERROR 21) and waits until the live group has ended, after its members' last
// stores.

// groupConsumers adds to cs the groups of a on this node: every one (name empty) or the one
// called name (stored). A group is listed from its stored state, overlaid with its live
// state where it is live here (liveGroupState), so a group whose members hold records they
// have not acknowledged yet, and so have stored nothing, is listed as it is now.
func (n *Node) groupConsumers(a *auth.Principal, name string, cs map[string]*manage.Consumer) error {
	prefix := auth.ConsumerPrefix(a)
	if name != "" {
		prefix = name
	}
	err := n.wal.Groups(prefix, func(g wal.GroupInfo) bool {
		if groups.IsMirroredGroup(g.Name) { // another region's, kept for a failover (groupvector.go)
			return true
		}
		if name == "" || g.Name == name {
			c := n.groupState(g)
			cs[manage.Key(c.Kind, c.Name)] = c
		}
		return true
	})
	if err != nil {
		return err
	}
	// Live groups that stored nothing yet.
	for _, g := range n.liveGroups() {
		if !strings.HasPrefix(g.Name(), prefix) || groups.IsMirroredGroup(g.Name()) || name != "" && g.Name() != name {
			continue
		}
		if _, ok := cs[manage.Key(wire.KindGroup, g.Name())]; !ok {
			c := n.groupState(wal.GroupInfo{Name: g.Name(), Settings: g.Settings(), HasSettings: true})
			cs[manage.Key(c.Kind, c.Name)] = c
		}
	}
	return nil
}

// groupState is a group as a consumer: per topic, Resume is its floor and Pending the
// records not yet acknowledged, those never handed out (head - next) and those handed out
// and not done (outstanding); records retention deleted count for neither. Where the group
// is live on this node its live state of a topic stands for the stored one.
func (n *Node) groupState(g wal.GroupInfo) *manage.Consumer {
	c := &manage.Consumer{Name: g.Name, Kind: wire.KindGroup, Pattern: g.Settings.Pattern,
		Group: &wire.ConsumerGroup{AckWait: uint64(max(g.Settings.AckWait, 0)), MaxDeliver: g.Settings.MaxDeliver,
			DeadLetter: g.Settings.DeadLetter, Order: g.Settings.Order},
		Outstanding: make(map[string]uint64, len(g.States))}
	var live map[string]groups.TopicState
	if lg := n.liveGroup(g.Name); lg != nil {
		live = lg.LiveState()
	}
	row := func(topic string, floor, next uint64, outstanding []uint64, updated time.Time) {
		first, head, ok := n.wal.Bounds(topic)
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
		c.Topics = append(c.Topics, wire.ConsumerTopic{Topic: topic, Resume: floor, Next: head, Pending: fresh + out, Updated: manage.UnixNano(updated)})
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
	n.unreadTopics(g, c.Outstanding, row)
	c.Members = n.groupMembers(g.Name)
	return c
}

// unreadTopics lists with row the topics of this node's log that group g follows and has no
// state of (neither stored nor live): a group with a stored start stores a state of a topic
// only once it hands out a record of it (node/groups: lazy), so the others are at the group's
// start, their pending records counted from there. listed holds the topics listed already.
func (n *Node) unreadTopics(g wal.GroupInfo, listed map[string]uint64, row func(topic string, floor, next uint64, outstanding []uint64, updated time.Time)) {
	if g.Settings.Start.Kind == wal.GroupStartUnknown {
		return // a state of every topic it follows is stored
	}
	m, err := routing.NewMatcher(g.Settings.Pattern)
	if err != nil {
		return
	}
	for _, ti := range n.wal.Topics() {
		if _, ok := listed[ti.Name]; ok || !m.Match(ti.Name) || !n.wal.IsLocal(ti.Name) {
			continue
		}
		if start, ok := n.wal.StartOf(ti.Name, g.Settings.Start); ok {
			row(ti.Name, start, start, nil, time.Time{})
		}
	}
}

// liveGroup is the live group name (stored) on this node, or nil.
func (n *Node) liveGroup(name string) *groups.Group {
	n.cons.mu.Lock()
	defer n.cons.mu.Unlock()
	return n.cons.mu.groups[name]
}

// groupMembers counts the members of group name (stored) connected to this node now.
func (n *Node) groupMembers(name string) int {
	g := n.liveGroup(name)
	if g == nil {
		return 0
	}
	return g.MemberCount()
}

// endGroup ends the members of group name (stored) on this node with e and waits until the
// live group has ended: after every member's last store.
func (n *Node) endGroup(ctx context.Context, name string, e *wire.Error) *wire.Error {
	g := n.liveGroup(name)
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

// fenceGroup keeps members from joining group name (stored) until the returned func is
// called; op ("reset", "removed") says why to a member refused meanwhile.
func (n *Node) fenceGroup(name, op string) (unfence func(), e *wire.Error) {
	c := &n.cons
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev, ok := c.mu.fenced[name]; ok {
		return nil, wire.Errorf(wire.CodeInUse, "group %q is being %s by another request: try again once it is done", name, prev)
	}
	if c.mu.fenced == nil {
		c.mu.fenced = make(map[string]string)
	}
	c.mu.fenced[name] = op
	return func() {
		c.mu.Lock()
		delete(c.mu.fenced, name)
		c.mu.Unlock()
	}, nil
}

// resetGroup puts group c at start on each of its topics: a new floor and next offset, and
// an empty window (the outstanding set is cleared in the same batch). Records handed out
// before are delivered again if the reset moved before them.
func (n *Node) resetGroup(ctx context.Context, a *auth.Principal, c manage.Consumer, start wal.Start, force bool) *wire.Error {
	unfence, e := n.fenceGroup(c.Name, "reset")
	if e != nil {
		return e
	}
	defer unfence()
	c.Members = n.groupMembers(c.Name) // now that none can join
	propose := n.proposesGroupOp(a, c.Name)
	if e := n.checkMembers(ctx, a, c, "reset", force); e != nil {
		return e
	}
	states := make(map[string]*wal.GroupState, len(c.Topics))
	for _, t := range c.Topics {
		off, err := n.wal.ResolveStart(t.Topic, start)
		if errors.Is(err, wal.ErrUnknownTopic) || errors.Is(err, wal.ErrTopicDeleted) {
			continue // no records left to put it before
		}
		if err != nil {
			return manageErr(err)
		}
		states[t.Topic] = &wal.GroupState{Floor: off, Next: off}
	}
	for topic, st := range states {
		if n.replicatedGroupTopic(topic) {
			delete(states, topic)
			if propose {
				if _, e := n.rep.setGroup(ctx, c.Name, topic, &replica.GroupOp{State: st}); e != nil { // grouprepl.go
					return e
				}
			}
		}
	}
	if err := n.wal.SetGroup(ctx, c.Name, nil, states); err != nil {
		return manageErr(err)
	}
	return nil
}

// removeGroup removes group c (its settings and every topic's state) and returns how many
// topic states it had.
func (n *Node) removeGroup(ctx context.Context, a *auth.Principal, c manage.Consumer, force bool) (int, *wire.Error) {
	unfence, e := n.fenceGroup(c.Name, "removed")
	if e != nil {
		return 0, e
	}
	defer unfence()
	c.Members = n.groupMembers(c.Name)
	propose := n.proposesGroupOp(a, c.Name)
	if e := n.checkMembers(ctx, a, c, "remove", force); e != nil {
		return 0, e
	}
	// A replicated topic's state (and the settings with it) is removed through its raft
	// group, before anything here: a removal that does not commit leaves every replica as it
	// was. The removed states are counted once in the region, by the node that proposed.
	removed := 0
	for _, t := range c.Topics {
		if !n.replicatedGroupTopic(t.Topic) {
			removed++
			continue
		}
		if propose {
			if _, e := n.rep.setGroup(ctx, c.Name, t.Topic, &replica.GroupOp{Remove: true}); e != nil { // grouprepl.go
				return 0, e
			}
			removed++
		}
	}
	if _, _, err := n.wal.DeleteGroup(ctx, c.Name); err != nil {
		return 0, manageErr(err)
	}
	return removed, nil
}

// replicatedGroupTopic reports whether a group's state of topic is replicated state
// (grouprepl.go), which a reset or removal changes through the topic's raft group.
func (n *Node) replicatedGroupTopic(topic string) bool {
	return !groupStateLocalOnly && n.topics.IsReplicated(topic)
}

// proposesGroupOp reports whether this node proposes a reset or removal of group name's
// replicated states: the node the request came to does, and so does a node it is passed on
// to that serves the group (a forced operation ends its members there, and their last
// stores, proposed meanwhile, must not outlive it). Called before the members are ended.
func (n *Node) proposesGroupOp(a *auth.Principal, name string) bool {
	return a != auth.PeerActor || n.liveGroup(name) != nil
}

// groupDependents names the groups with state on topic, or live on this node and following
// it, as a sees them.
func (n *Node) groupDependents(a *auth.Principal, topic string) []string {
	names := make(map[string]bool)
	err := n.wal.Groups("", func(g wal.GroupInfo) bool {
		if g.States[topic] != nil && !groups.IsMirroredGroup(g.Name) {
			names[g.Name] = true
		}
		return true
	})
	if err != nil {
		n.log.Warn("listing the groups of a topic failed", "topic", topic, "err", err)
	}
	for _, g := range n.liveGroups() {
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

// liveGroups are the groups live on this node.
func (n *Node) liveGroups() []*groups.Group {
	n.cons.mu.Lock()
	defer n.cons.mu.Unlock()
	gs := make([]*groups.Group, 0, len(n.cons.mu.groups))
	for _, g := range n.cons.mu.groups {
		gs = append(gs, g)
	}
	return gs
}

// topicRemoved brings the live groups in step with a purge (their floor moves up to cut)
// or a delete (they forget the topic) that wal has done to their stored states already.
func (n *Node) topicRemoved(topic string, deleted bool, cut uint64) {
	for _, g := range n.liveGroups() {
		if deleted {
			g.DropTopic(topic)
		} else {
			g.Purged(topic, cut)
		}
	}
}

// groupNameTaken reports whether a group named name (stored) is stored: a durable of that
// name is refused, so that management names one consumer.
func (n *Node) groupNameTaken(name string) bool {
	_, _, ok, _ := n.wal.Group(name) // a damaged state is no name (loading the group reports it)
	return ok
}

// durableNameTaken reports whether durable positions named name (stored) exist: a new group
// of that name is refused.
func (n *Node) durableNameTaken(name string) bool {
	return slices.Contains(n.wal.PositionNames(name), name)
}

// checkNewGroup refuses a group that is not stored yet when a durable consumer has its name
// (stored) or when a's tenant is at MaxDurablesPerTenant.
func (n *Node) checkNewGroup(a *auth.Principal, name string) *wire.Error {
	if n.liveGroup(name) != nil || n.groupNameTaken(name) {
		return nil
	}
	if n.durableNameTaken(name) {
		return wire.Errorf(wire.CodeConflict, "%q is the name of a durable consumer: a consumer group needs a name of its own", a.ConsumerView(name))
	}
	if a.Tenant != "" {
		return n.checkDurables(a, name)
	}
	return nil
}

// groupCount is how many groups with prefix are stored (for MaxDurablesPerTenant), and
// whether name is one of them.
func (n *Node) groupCount(prefix, name string) (int, bool) {
	names, err := n.wal.GroupNames(prefix)
	if err != nil {
		n.log.Warn("counting groups failed", "prefix", prefix, "err", err)
	}
	return len(names), slices.Contains(names, name)
}

// checkDurables refuses a tenant's new durable consumer or consumer group past
// MaxDurablesPerTenant (counting the durables with a position and the groups with state
// stored on this node: both are stored state that only `consumers rm` removes).
func (n *Node) checkDurables(a *auth.Principal, durable string) *wire.Error {
	if durable == "" {
		return nil
	}
	prefix := "tenant/" + a.Tenant + "/"
	names := n.wal.PositionNames(prefix)
	groups, isGroup := n.groupCount(prefix, durable)
	if len(names)+groups < n.cfg.MaxDurablesPerTenant || slices.Contains(names, durable) || isGroup {
		return nil
	}
	return wire.Errorf(wire.CodeLimit, "tenant %q has %d durable consumers and consumer groups on this node, the limit is %d (MaxDurablesPerTenant); reuse one, or remove one with `quicmq consumers rm NAME` (`quicmq consumers` lists them)",
		a.Tenant, len(names)+groups, n.cfg.MaxDurablesPerTenant)
}
