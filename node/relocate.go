package node

import (
	"cmp"
	"context"
	"maps"
	"slices"

	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/node/relocate"
)

// What node/relocate (drains, leader balance, removals, replica moves, the replica
// balancer, replacements) is given of the replicated path, once, in newReplicated: the
// driver itself, the metadata as relocMeta and the region as relocMesh. The relocator's
// records are applied by watchMeta (replform.go), its two goroutines run with the others
// (replicated.start), a stop hands the leaderships away through it (node.go), and the
// admin API's region nodes are its (manage.go).

// node's metadata group is relocate's: a stored group ID, the same in both (a constant
// that would go negative on either side does not compile).
const _ = uint64(metaGroup-relocate.MetaGroup) + uint64(relocate.MetaGroup-metaGroup)

func newRelocator(r *replicated) *relocate.Relocator {
	n, c := r.n, r.n.cfg.Raft
	return relocate.New(relocate.Config{
		Name: n.cfg.Name, Region: n.cfg.Region, ID: r.id, Replicas: n.cfg.Replicas,
		Settings: relocate.Settings{
			TickInterval: c.TickInterval, ObserveInterval: c.ObserveInterval, QuorumTimeout: c.QuorumTimeout,
			ElectionTicks: c.ElectionTicks, BalanceInterval: c.BalanceInterval, Moves: c.Moves,
			DisableReplicaBalance: c.DisableReplicaBalance, ReplaceAfter: c.ReplaceAfter,
			StopHandOff: c.StopHandOff, CaughtUp: rejoinMaxLag,
		},
		Log: n.log, Registerer: n.reg, Changes: r.rejoinM.changes,
		Raft: r.d, Meta: relocMeta{r}, Mesh: relocMesh{r},
	})
}

// relocMeta is the replicated path's metadata as relocate.Meta.
type relocMeta struct{ r *replicated }

func (m relocMeta) Formed() bool {
	m.r.mu.Lock()
	defer m.r.mu.Unlock()
	return m.r.mu.formed
}

func (m relocMeta) Members() relocate.Members {
	r := m.r
	r.mu.Lock()
	defer r.mu.Unlock()
	return relocate.Members{Voters: slices.Clone(r.mu.voters), Learners: slices.Clone(r.mu.learners),
		IDs: maps.Clone(r.mu.ids), Names: maps.Clone(r.mu.names)}
}

func exportGroup(g *repGroup) relocate.Group {
	out := relocate.Group{ID: g.id, Label: g.label, Local: g.local, Replicas: make([]relocate.Replica, len(g.replicas))}
	for i, m := range g.replicas {
		out.Replicas[i] = relocate.Replica{Name: m.name, ID: m.id}
	}
	return out
}

func (m relocMeta) Groups() []relocate.Group {
	r := m.r
	r.pl.RLock()
	out := make([]relocate.Group, 0, len(r.pl.groups))
	for _, g := range r.pl.groups {
		out = append(out, exportGroup(g))
	}
	r.pl.RUnlock()
	slices.SortFunc(out, func(a, b relocate.Group) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

func (m relocMeta) Group(id uint64) (relocate.Group, bool) {
	r := m.r
	r.pl.RLock()
	defer r.pl.RUnlock()
	if g := r.pl.groups[id]; g != nil {
		return exportGroup(g), true
	}
	return relocate.Group{}, false
}

func (m relocMeta) LocalGroups() []uint64 {
	var out []uint64
	for _, g := range m.r.localGroups() {
		out = append(out, g.id)
	}
	return out
}

func (m relocMeta) GroupLabel(id uint64) string { return m.r.groupLabel(id) }

// ReadAll: a metadata leader newly elected may not have read the records its predecessor
// committed.
func (m relocMeta) ReadAll(ctx context.Context) bool {
	r := m.r
	st, err := r.d.Status(ctx, metaGroup)
	if err != nil {
		return false
	}
	next, applied := r.meta.Next(metaGroup)
	r.mu.Lock()
	read := r.mu.read
	r.mu.Unlock()
	return applied >= st.GetCommit() && read >= next
}

func (m relocMeta) WaitRead(ctx context.Context, offset uint64) {
	r := m.r
	for {
		r.mu.Lock()
		read, ch := r.mu.read, r.mu.changed
		r.mu.Unlock()
		if read > offset {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}

// Moved applies a move's end to the placement (watchMeta's goroutine, in a done record's
// apply): the group's replicas name to instead of from.
func (m relocMeta) Moved(group uint64, from, to string, toID uint64) {
	r := m.r
	r.mu.Lock()
	if _, ok := r.mu.ids[to]; !ok {
		r.mu.ids[to] = toID
	}
	if _, ok := r.mu.names[toID]; !ok {
		r.mu.names[toID] = to
	}
	r.pl.Lock() // r.mu, then r.pl, as applyMember
	if g := r.pl.groups[group]; g != nil {
		c := *g // readers hold the old *repGroup and its replicas without the lock
		c.replicas = slices.Clone(g.replicas)
		c.local = false
		for i, x := range c.replicas {
			if x.name == from {
				c.replicas[i] = repMember{name: to, id: r.mu.ids[to]}
			}
			c.local = c.local || c.replicas[i].name == r.n.cfg.Name
		}
		r.pl.groups[group] = &c
	}
	r.pl.Unlock()
	r.notifyLocked()
	r.mu.Unlock()
}

// relocMesh is the region, as gossip and the links show it to the replicated path, as
// relocate.Mesh.
type relocMesh struct{ r *replicated }

func (m relocMesh) Gossip() bool { return m.r.n.gossip != nil }

func (m relocMesh) RegionMembers() []gossip.Member {
	return m.r.n.gossip.RegionMembers(m.r.n.cfg.Region)
}

func (m relocMesh) SetTag(key, value string) error         { return m.r.n.setMeshTag(key, value) }
func (m relocMesh) MemberStatus(name string) gossip.Status { return m.r.n.place.MemberStatus(name) }
func (m relocMesh) MemberName(id uint64) string            { return m.r.memberName(id) }
func (m relocMesh) Reachable(name string) bool             { return m.r.reachable(name) }

func (m relocMesh) RaftMembers() []relocate.Member {
	rm := m.r.raftMembers()
	out := make([]relocate.Member, len(rm))
	for i, x := range rm {
		out[i] = relocate.Member{Name: x.name, ID: x.id, Alive: x.alive}
	}
	return out
}

func (m relocMesh) RegionKnows(feature string, level int) (bool, []string) {
	return m.r.n.RegionKnows(feature, level)
}
