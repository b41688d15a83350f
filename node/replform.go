package node

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/node/relocate"
)

// Forming the region's metadata group once enough nodes are known, and applying what it
// records (placements) as the metadata leader's entries commit.

// raftMember is a node of the region with a raft ID, as gossip tells.
type raftMember struct {
	name  string
	id    uint64
	alive bool
}

// raftMembers lists the region's nodes that gossip knows with a raft ID, this one
// included, by name.
func (r *replicated) raftMembers() []raftMember {
	n := r.n
	out := []raftMember{{name: n.cfg.Name, id: r.id, alive: true}}
	for _, m := range n.gossip.RegionMembers(n.cfg.Region) {
		if m.Name == n.cfg.Name || m.Status == gossip.StatusLeft || m.Status == gossip.StatusLeaving {
			continue
		}
		id, err := strconv.ParseUint(m.Tags[tagRaft], 10, 64)
		if err != nil || id == 0 {
			continue
		}
		out = append(out, raftMember{name: m.Name, id: id, alive: m.Status == gossip.StatusAlive})
	}
	slices.SortFunc(out, func(a, b raftMember) int { return strings.Compare(a.name, b.name) })
	return out
}

// form opens the metadata group: the stored one, or, when none is stored, a new one once
// Replicas nodes of the region are alive with raft IDs, if this node is among the first
// Replicas of them by name.
func (r *replicated) form(ctx context.Context) {
	n := r.n
	retry := time.NewTicker(n.cfg.Raft.ObserveInterval)
	defer retry.Stop()
	for {
		changed := n.place.Changed()
		if r.tryForm(ctx) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-retry.C:
		}
	}
}

func (r *replicated) tryForm(ctx context.Context) bool {
	n := r.n
	err := r.d.AddGroup(ctx, metaGroup, nil) // the stored group, if any
	formed, metaNames := r.regionFormed()
	learner := false
	if err != nil && formed && !slices.Contains(metaNames, n.cfg.Name) {
		// Formed without this node (a region of more than Replicas nodes): it joins the
		// metadata group empty, the leader adds it as a learner (replmember.go), and once it
		// has read the placements it holds the replicas placed on it. Until then it relays
		// to the voters (viaVoter).
		if err = r.d.JoinGroup(ctx, metaGroup); err != nil {
			n.log.Warn("could not join the region's metadata group", "err", err)
			return false
		}
		n.log.Info("joining the region's metadata group as a learner: the region has more nodes than replicas per topic, and topics are placed on this node too",
			"raft_id", r.id, "voters", metaNames)
		learner = true
	}
	if err != nil && formed {
		// The region's metadata group exists and this node stores nothing of it: it was
		// wiped (or is new under a name of the region). It joins empty, and the group's
		// leader replaces its old ID by this one once it has caught up (replmember.go).
		if err = r.d.JoinGroup(ctx, metaGroup); err != nil {
			n.log.Warn("could not join the region's metadata group", "err", err)
			return false
		}
		n.log.Info("joining the region's metadata group as a new member: its leader adds this node as a learner, which catches up before it votes",
			"raft_id", r.id)
		r.mu.Lock()
		r.mu.joining = true
		r.mu.Unlock()
	}
	if err != nil {
		var alive []raftMember
		for _, m := range r.raftMembers() {
			if m.alive {
				alive = append(alive, m)
			}
		}
		if len(alive) < n.cfg.Replicas {
			r.mu.Lock()
			r.mu.forming = nil
			for _, m := range alive {
				r.mu.forming = append(r.mu.forming, m.name)
			}
			r.mu.Unlock()
			return false
		}
		voters := alive[:n.cfg.Replicas]
		var ids []uint64
		var names []string
		for _, m := range voters {
			ids, names = append(ids, m.id), append(names, m.name)
		}
		if !slices.Contains(ids, r.id) {
			r.mu.Lock()
			r.mu.outside = names
			r.mu.Unlock()
			return false
		}
		if err = r.d.AddGroup(ctx, metaGroup, ids); err != nil {
			n.log.Warn("could not form the region's metadata group", "voters", names, "err", err)
			return false
		}
		n.log.Info("formed the region's metadata group", "voters", names)
	}
	var voters, learners []uint64
	if m, err := r.d.Membership(ctx, metaGroup); err == nil {
		voters, learners = m.Voters, m.Learners
	}
	r.mu.Lock()
	r.mu.formed, r.mu.voters, r.mu.learners, r.mu.outside, r.mu.forming = true, voters, learners, nil, nil
	if learner {
		r.mu.outside = metaNames // until it has caught up (observe)
	}
	r.notifyLocked()
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	// After waking watchMeta: setting gossip tags waits for the update's broadcast (up to
	// a gossip interval per pool, ~0.7 s with the WAN pool), and opening this node's
	// topic groups needs nothing from it.
	r.advertiseFormed(ctx)
	return true
}

// watchMeta reads the metadata group's placements as they are applied and opens the group
// of every topic placed on this node.
func (r *replicated) watchMeta(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
		for {
			r.mu.Lock()
			from, formed := r.mu.read, r.mu.formed
			r.mu.Unlock()
			if !formed {
				break
			}
			recs, err := r.meta.Read(metaGroup, from, 256)
			if err != nil {
				r.n.log.Error("reading the region's metadata failed", "err", err)
				break
			}
			for _, rec := range recs {
				switch {
				case len(rec.Data) > 0 && rec.Data[0] == memberVersion:
					r.applyMember(rec.Data)
				case len(rec.Data) > 0 && rec.Data[0] == groupsVersion:
					r.applyGroups(ctx, rec.Data) // replgroups.go
				case len(rec.Data) > 0 && rec.Data[0] == relocate.DrainVersion:
					r.reloc.ApplyDrain(rec.Data) // node/relocate
				case len(rec.Data) > 0 && rec.Data[0] == relocate.MoveVersion:
					r.reloc.ApplyMove(ctx, rec.Data)
				default:
					r.applyPlacement(ctx, rec.Data)
				}
			}
			r.mu.Lock()
			r.mu.read += uint64(len(recs))
			r.notifyLocked()
			r.mu.Unlock()
			if len(recs) > 0 {
				r.n.fed.Resync() // topics this node may now mirror (shouldMirror)
			}
			if len(recs) < 256 {
				break
			}
		}
	}
}

// applyPlacement applies a placement record of version 1: a topic in a group of its own
// (the layout of regions formed before groups held many topics). The first placement of a
// topic wins.
func (r *replicated) applyPlacement(ctx context.Context, data []byte) {
	t, err := decodePlacement(data)
	if err != nil {
		r.n.log.Error("a metadata record could not be decoded; it is skipped on every node alike", "err", err)
		return
	}
	g := &repGroup{id: t.group, replicas: t.replicas, boot: t.boot, label: t.name}
	// A replica is named by its node's name: a node restarted empty holds what its name
	// held, under its new raft ID (replmember.go).
	for _, m := range t.replicas {
		g.local = g.local || m.name == r.n.cfg.Name
	}
	if g.local && r.n.wal.IsLocal(t.name) {
		// A single-copy log of the name exists here (a mirror or a dead-letter append made
		// it before the placement): binding it would stop the driver. This replica stays
		// out of the group; the others hold the topic.
		r.n.log.Error("a replicated topic has a single-copy log of its name on this node: this node does not take its replica",
			"topic", t.name, "replicas", t.names())
		g.local = false
	}
	r.nameReplicas(g)
	r.pl.Lock()
	if _, placed := r.pl.topics[t.name]; placed || r.pl.groups[g.id] != nil {
		r.pl.Unlock()
		return
	}
	r.declareLocked(g)
	r.placeLocked(t.name, g)
	r.pl.Unlock()
	if g.local {
		r.openGroup(ctx, g)
	}
	r.unparkPlaced([]string{t.name}) // replpark.go
}

// metaLacking names the metadata voters this node cannot reach.
func (r *replicated) metaLacking() string {
	r.mu.Lock()
	voters := slices.Clone(r.mu.voters)
	r.mu.Unlock()
	var out []string
	for _, m := range r.raftMembers() {
		if slices.Contains(voters, m.id) && !r.reachable(m.name) {
			out = append(out, m.name)
		}
	}
	if len(out) == 0 {
		return "every voter is reachable from here"
	}
	return "unreachable: " + strings.Join(out, ", ")
}
