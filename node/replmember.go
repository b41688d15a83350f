package node

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3"

	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/replica"
)

// Membership changes of a replicated region: a node whose data directory was lost comes
// back empty under its name and gossip address with a new raft ID (federation.RaftNodeID:
// IDs are never reused). It joins the metadata group empty (tryForm: the region has
// formed, as gossip's tagMeta says, so it must not form a group of its own), replays the
// metadata log it is sent, and joins the group of every topic whose replica set names it.
// The leader of each such group replaces the old ID by the new one with replica.ReplaceStep:
// the new ID is added as a learner, catches up (through a metadata-only snapshot and the
// records fetched from the leader's log once the group's log was compacted, then from the
// log), and only then becomes a voter while the old
// ID is removed, in one joint ConfChangeV2 (I8). The metadata group goes first: its leader
// acts when gossip shows a voter's name under another ID, and once the new ID votes there
// it records the name's new ID (a member record, replmeta.go), which every topic group's
// leader then acts on.
//
// An old ID is never removed while it may still run: only when the same name reports a
// different ID, and only after this leader has not heard from the old ID for two election
// timeouts (raft's RecentActive, reset every election timeout by CheckQuorum); an old ID
// heard from meanwhile (two processes claiming one name) is refused and logged.

// tagMeta is the gossip tag a node sets once it holds its region's metadata group, to the
// names of the group's voters it knows (comma-separated): a node that stores nothing of the
// group and sees the tag on a live node never forms a group of its own; it joins the group
// if its name is among the voters (it was wiped), and otherwise stays outside.
const tagMeta = "meta"

// rejoinMaxLag is how far (in entries) a learner's match index may trail its leader's
// commit index when it is promoted: appends in flight while the group takes writes.
const rejoinMaxLag = 64

// rejoinState is what the observe goroutine, which alone runs rejoinStep, remembers of
// the replacements it drives.
type rejoinState struct {
	silentSince map[[2]uint64]time.Time            // (group, old ID) -> first seen silent here
	last        map[[2]uint64]replica.ReplaceState // (group, old ID) -> last state logged
	learnerAt   map[[2]uint64]time.Time            // (group, old ID) -> learner added
}

// rejoinMetrics are the membership changes' metrics.
type rejoinMetrics struct {
	changes  *prometheus.CounterVec
	learners prometheus.Gauge
}

func newRejoinMetrics(reg prometheus.Registerer) *rejoinMetrics {
	m := &rejoinMetrics{
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "quicmq_raft_membership_changes_total",
			Help: "Membership changes this node proposed as a raft group's leader, by step: add_learner, promote (the learner votes and the old ID is removed, one joint change), remove_old, record (the metadata records a name's new raft ID), add_region_learner (a node past the region's first replicas joins the metadata group as a learner)."}, []string{"step"}),
		learners: prometheus.NewGauge(prometheus.GaugeOpts{Name: "quicmq_raft_learners",
			Help: "Learners (replicas catching up before they vote) in the raft groups this node leads."}),
	}
	reg.MustRegister(m.changes, m.learners)
	return m
}

// regionFormed reports whether a live node of the region holds its metadata group, and
// the names of the group's voters the live nodes advertise.
func (r *replicated) regionFormed() (bool, []string) {
	n := r.n
	if n.gossip == nil {
		return false, nil
	}
	formed := false
	var names []string
	for _, m := range n.gossip.RegionMembers(n.cfg.Region) {
		v, ok := m.Tags[tagMeta]
		if m.Name == n.cfg.Name || m.Status != gossip.StatusAlive || !ok {
			continue
		}
		formed = true
		for _, name := range strings.Split(v, ",") {
			if name != "" && !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	slices.Sort(names)
	return formed, names
}

// advertiseFormed sets tagMeta in gossip to the names of the metadata voters this node
// knows (the form and observe goroutines, one at a time: form returns before observe's
// first call matters, and both only ever grow the tag to what the group says).
func (r *replicated) advertiseFormed(ctx context.Context) {
	n := r.n
	m, err := r.d.Membership(ctx, metaGroup)
	if n.gossip == nil || err != nil || len(m.Voters) == 0 {
		return
	}
	r.mu.Lock()
	names := maps.Clone(r.mu.names)
	r.mu.Unlock()
	for _, gm := range r.raftMembers() {
		names[gm.id] = gm.name
	}
	var voters []string
	for _, v := range m.Voters {
		if name := names[v]; name != "" {
			voters = append(voters, name)
		}
	}
	slices.Sort(voters)
	if err := n.setMeshTag(tagMeta, strings.Join(voters, ",")); err != nil {
		n.log.Warn("could not advertise the metadata group in gossip", "err", err)
	}
}

// applyMember applies a member record: name is raft node id from now on (watchMeta).
func (r *replicated) applyMember(data []byte) {
	name, id, err := decodeMember(data)
	if err != nil {
		r.n.log.Error("a metadata record could not be decoded; it is skipped on every node alike", "err", err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.mu.ids[name]
	r.mu.ids[name], r.mu.names[id] = id, name
	if old == id {
		return
	}
	r.pl.Lock() // r.mu, then r.pl: the one place both are held
	for gid, g := range r.pl.groups {
		for i, m := range g.replicas {
			if m.name == name {
				c := *g // readers hold the old *repGroup and its replicas without the lock
				c.replicas = append([]repMember(nil), g.replicas...)
				c.replicas[i].id = id
				r.pl.groups[gid] = &c
			}
		}
	}
	r.pl.Unlock()
	if old != 0 {
		r.n.log.Info("the region's metadata records a node's new raft ID", "node", name, "old_raft_id", old, "raft_id", id)
	}
	r.notifyLocked()
}

// rejoinStep takes the next membership step in every group this node leads (the observe
// goroutine, every ObserveInterval).
func (r *replicated) rejoinStep(ctx context.Context) {
	learners := 0
	if m, err := r.d.Membership(ctx, metaGroup); err == nil && m.Status.RaftState == raft.StateLeader {
		learners += len(m.Learners)
		r.metaMembers(ctx, m)
	}
	r.mu.Lock()
	ids, names := maps.Clone(r.mu.ids), maps.Clone(r.mu.names)
	r.mu.Unlock()
	for _, t := range r.localGroups() {
		m, err := r.d.Membership(ctx, t.id)
		if err != nil || m.Status.RaftState != raft.StateLeader {
			continue
		}
		learners += len(m.Learners)
		for _, v := range append(m.Voters, m.Outgoing...) {
			name := names[v]
			if cur := ids[name]; name != "" && cur != 0 && cur != v {
				r.replace(ctx, t.id, t.label, m, v, cur, name)
			}
		}
	}
	r.rejoinM.learners.Set(float64(learners))
	r.advertiseFormed(ctx)
}

// metaMembers names the metadata voters the log does not name yet, replaces a voter whose
// name gossip now shows under another ID, and records the name's new ID once it votes.
func (r *replicated) metaMembers(ctx context.Context, m replica.Membership) {
	byName := map[string]raftMember{}
	for _, gm := range r.raftMembers() {
		byName[gm.name] = gm
	}
	r.mu.Lock()
	ids, names := maps.Clone(r.mu.ids), maps.Clone(r.mu.names)
	r.mu.Unlock()
	for _, v := range m.Voters {
		name, ok := names[v]
		if !ok {
			for _, gm := range byName {
				if gm.id == v {
					r.proposeMember(ctx, gm.name, v, "")
				}
			}
			continue
		}
		if gm, ok := byName[name]; ok && gm.alive && gm.id != v {
			r.replace(ctx, metaGroup, "_meta", m, v, gm.id, name)
		}
	}
	for name, cur := range ids {
		if gm, ok := byName[name]; ok && gm.alive && gm.id != cur && !m.Joint() && m.IsVoter(gm.id) && !m.IsVoter(cur) {
			r.proposeMember(ctx, name, gm.id, "record")
		}
	}
	r.addRegionLearners(ctx, m, byName, names)
}

// addRegionLearners adds, as learners of the metadata group, the live nodes of a region
// larger than Replicas that are no member of it: they read the placements and hold the
// replicas placed on them, without weighing on the metadata's quorum. A node whose name a
// voter holds is a rejoin, which replace handles; one change at a time, as raft requires.
func (r *replicated) addRegionLearners(ctx context.Context, m replica.Membership, byName map[string]raftMember, names map[uint64]string) {
	if m.Joint() {
		return
	}
	voterNames := map[string]bool{}
	for _, v := range append(slices.Clone(m.Voters), m.Outgoing...) {
		if name := names[v]; name != "" {
			voterNames[name] = true
		}
		for _, gm := range byName {
			if gm.id == v {
				voterNames[gm.name] = true
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		gm := byName[name]
		if !gm.alive || m.IsVoter(gm.id) || m.IsLearner(gm.id) || voterNames[name] || r.reloc.Gone(name) {
			continue
		}
		if err := r.d.ProposeConfChange(ctx, metaGroup, replica.AddLearner(gm.id)); err != nil {
			r.n.log.Debug("adding a node of the region to its metadata group as a learner", "node", name, "raft_id", gm.id, "err", err)
			return
		}
		r.rejoinM.changes.WithLabelValues("add_region_learner").Inc()
		r.n.log.Info("membership change: a node of the region past its first replicas joins the metadata group as a learner; topics are placed on it too",
			"node", name, "raft_id", gm.id)
		return
	}
}

func (r *replicated) proposeMember(ctx context.Context, name string, id uint64, step string) {
	pctx, cancel := context.WithTimeout(ctx, r.n.cfg.Raft.QuorumTimeout)
	defer cancel()
	if _, err := r.d.Propose(pctx, metaGroup, encodeMember(name, id)); err != nil {
		r.n.log.Debug("recording a node's raft ID in the region's metadata", "node", name, "raft_id", id, "err", err)
		return
	}
	if step != "" {
		r.rejoinM.changes.WithLabelValues(step).Inc()
	}
}

// replace takes the next step replacing voter oldID of group g (label: its topic, or
// "_meta") by newID, the ID node name reports now, logging each change of state.
func (r *replicated) replace(ctx context.Context, g uint64, label string, m replica.Membership, oldID, newID uint64, name string) {
	n, rs := r.n, &r.rejoin
	key := [2]uint64{g, oldID}
	now := time.Now()
	if m.Active[oldID] {
		delete(rs.silentSince, key)
	} else if _, ok := rs.silentSince[key]; !ok {
		rs.silentSince[key] = now
	}
	state, cc := replica.ReplaceStep(m, oldID, newID, rejoinMaxLag)
	if state == replica.ReplaceOldAlive {
		// An idle group is quiet, and a quiet leader never ticks, so raft would keep the
		// old ID "recently active" forever: keep the group ticking while this waits.
		if err := r.d.Wake(ctx, g); err != nil {
			n.log.Debug("waking a group to see a replica fall silent", "group", label, "err", err)
		}
	}
	silence := 2 * time.Duration(n.cfg.Raft.ElectionTicks) * n.cfg.Raft.TickInterval
	if state == replica.ReplaceAddLearner && now.Sub(rs.silentSince[key]) < silence {
		return // this leader may not have heard from old for long enough yet
	}
	log := n.log.With("group", label, "node", name, "old_raft_id", oldID, "raft_id", newID, "commit", m.Status.GetCommit(), "learner_match", m.Match[newID])
	if rs.last[key] != state {
		rs.last[key] = state
		switch state {
		case replica.ReplaceOldAlive:
			log.Warn("refusing to replace a replica: its old raft ID is still heard from while its name reports a new one (two processes claim one name?)")
		case replica.ReplaceCatchingUp:
			log.Info("a rejoining replica is catching up as a learner")
		case replica.ReplaceDone:
			log.Info("a rejoining replica votes again under its new raft ID; its old ID is removed", "took", now.Sub(rs.learnerAt[key]).Round(time.Millisecond))
		}
	}
	if cc == nil {
		return
	}
	if err := r.d.ProposeConfChange(ctx, g, cc); err != nil {
		log.Warn("membership change refused", "step", state.String(), "err", err)
		return
	}
	step := map[replica.ReplaceState]string{replica.ReplaceAddLearner: "add_learner", replica.ReplacePromote: "promote", replica.ReplaceRemoveOld: "remove_old"}[state]
	r.rejoinM.changes.WithLabelValues(step).Inc()
	switch state {
	case replica.ReplaceAddLearner:
		if _, ok := rs.learnerAt[key]; !ok {
			rs.learnerAt[key] = now
		}
		log.Info("membership change: adding a rejoining replica as a learner")
	case replica.ReplacePromote:
		log.Info("membership change: the learner has caught up; promoting it and removing the old raft ID (one joint change)",
			"caught_up_in", now.Sub(rs.learnerAt[key]).Round(time.Millisecond), "entries", m.Match[newID])
	default:
		log.Info("membership change: removing the old raft ID", "step", state.String())
	}
}
