package node

import (
	"github.com/quicmq/quicmq/federation"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/groups"
	"github.com/quicmq/quicmq/wal"
)

// The node's side of consumer groups (group.go is a group itself): the table of live groups
// (consumers, durables.go), which members join and leave, and what a group needs of the node.

// joinGroup finds or starts the live group name (namespaced; shown to clients as shown)
// with the member's settings, and adds m to it. A member whose settings differ from the
// group's is refused with CodeConflict naming the difference.
func (n *Node) joinGroup(name, shown string, req *wire.Subscribe, want wal.GroupSettings, m *groups.Member) (*groups.Group, *wire.Error) {
	c := &n.cons
	c.mu.Lock()
	defer c.mu.Unlock()
	if op, ok := c.mu.fenced[name]; ok {
		return nil, wire.Errorf(wire.CodeInUse, "group %q is being %s by a management request: subscribe again once it is done", shown, op)
	}
	g := c.mu.groups[name]
	if g == nil {
		var e *wire.Error
		if g, e = groups.New(n.groups, name, shown, req, want); e != nil {
			return nil, e
		}
		if c.mu.groups == nil {
			c.mu.groups = make(map[string]*groups.Group)
		}
		c.mu.groups[name] = g
	} else if e := g.Conflict(want); e != nil {
		return nil, e
	}
	g.Join(m)
	return g, nil
}

// leaveGroup removes m from g; the last member's leave ends the live group.
func (n *Node) leaveGroup(g *groups.Group, m *groups.Member) {
	c := &n.cons
	c.mu.Lock()
	defer c.mu.Unlock()
	if g.Leave(m) {
		delete(c.mu.groups, g.Name())
	}
}

// Group is the live group name (stored) on this node, or nil (manage.LiveGroups).
func (c *consumers) Group(name string) *groups.Group {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.groups[name]
}

// All are the groups live on this node (manage.LiveGroups).
func (c *consumers) All() []*groups.Group {
	c.mu.Lock()
	defer c.mu.Unlock()
	gs := make([]*groups.Group, 0, len(c.mu.groups))
	for _, g := range c.mu.groups {
		gs = append(gs, g)
	}
	return gs
}

// Fence keeps members from joining group name (stored) until the returned func is called;
// op ("reset", "removed") says why to a member refused meanwhile (manage.LiveGroups: a
// reset or removal of the group).
func (c *consumers) Fence(name, op string) (unfence func(), e *wire.Error) {
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

// liveGroup is the live group name (stored) on this node, or nil.
func (n *Node) liveGroup(name string) *groups.Group { return n.cons.Group(name) }

// liveGroups are the groups live on this node.
func (n *Node) liveGroups() []*groups.Group { return n.cons.All() }

// newGroupEnv is what the node's live groups need of it (New makes it once the log is open).
func (n *Node) newGroupEnv() *groups.Env {
	return &groups.Env{
		Wal: n.wal, Log: n.log, Region: n.cfg.Region, Cfg: n.cfg.Groups,
		Where:     groups.SingleCopy{Wal: n.wal}, // newGroupWhere, once the replicated path exists
		Mirrored:  n.mirroredStates,
		ReadAhead: n.cfg.ReadAhead,
	}
}

// newGroupWhere picks, once (New, with n.topics), where the node's groups keep their state
// and dead letters: its own log, or the raft groups of its replicated topics (grouprepl.go).
func (n *Node) newGroupWhere() groups.Where {
	if n.rep == nil {
		return groups.SingleCopy{Wal: n.wal}
	}
	rw := groups.Replicated{Wal: n.wal, Raft: groupRaft{n.rep}, Region: n.cfg.Region,
		Live: func(name string) bool { return n.liveGroup(name) != nil }}
	if groupStateLocalOnly {
		return groupsLocalOnly{groups.SingleCopy{Wal: n.wal}, rw}
	}
	return rw
}

// mirrorCursorPrefix starts the position names of federation's mirror cursors (and of the
// group states mirrored from other regions).
const mirrorCursorPrefix = federation.CursorPrefix

// mirroredStates loads the states of group name mirrored from other regions, by topic
// (nothing when the build ignores them: gvec_broken.go).
func (n *Node) mirroredStates(name string) map[string][]*wal.GroupState {
	if ignoreMirroredGroups {
		return nil
	}
	out := make(map[string][]*wal.GroupState)
	err := n.wal.Groups(mirrorCursorPrefix, func(gi wal.GroupInfo) bool {
		if _, g, ok := federation.ParseMirroredGroup(gi.Name); ok && g == name {
			for topic, st := range gi.States {
				if st.Vector != nil {
					out[topic] = append(out[topic], st)
				}
			}
		}
		return true
	})
	if err != nil {
		n.log.Warn("mirrored group states not read: the group resumes from its own", "group", name, "err", err)
		return nil
	}
	return out
}
