package node

import (
	"context"
	"time"
)

// A first publish sent towards its group before its placement (issue 29).
//
// A new topic's first publish used to wait, on the node the client is connected to, for
// the metadata leader to place the topic and for this node to apply the placement, and only
// then went to its group's leader, which proposed it: the creation cost the ask, the
// metadata commit, its apply here, a relay and the group's commit, one after another, and
// one pipelined client keeps a fixed number of publishes in flight, so that chain bounded
// the region's creation rate.
//
// With RaftSettings.PredictPlacement (off by default: it measured no faster on a loaded
// machine) the node asks for the placement and, at once, relays the publish to the leader of
// the group the metadata leader will most likely choose: the placer's own rule (the group
// of the region's replica count picked by the topic's hash among those declared,
// groupsFor), over the groups this node has read. The leader that receives it waits for the
// placement as any relayed publish does (route, ensure) and only then proposes it, to its
// own group, or passes it on to the group the placement names. So a prediction is never
// trusted: a topic's entries are proposed only by a node that has applied its placement
// (every entry of a topic goes to its group: replica.WalSM's rule for topics a replica has
// not read the placement of), and a prediction that lost a race (groups declared meanwhile,
// an explicit `topics create --replicas` placing it on a group of another count) costs one
// more relay, never a record in the wrong group. The asks and the group's commit then
// overlap; the publish waits at the leader for the placement's apply there, not here.

// predictRoute returns the node to relay a publish of topic to before its placement is
// read here, having asked the metadata leader to place it; ok is false when this node has
// nothing to predict with, or would propose the publish itself (then it must wait for the
// placement: ensure).
func (r *replicated) predictRoute(ctx context.Context, topic string) (owner string, ok bool) {
	if !r.n.cfg.Raft.PredictPlacement || !r.manyGroups() {
		return "", false
	}
	r.mu.Lock()
	formed := r.mu.formed
	r.mu.Unlock()
	if !formed {
		return "", false
	}
	r.pl.RLock()
	var g *repGroup
	if gs := r.pl.many[r.n.cfg.Replicas]; len(gs) > 0 {
		g = r.pl.groups[gs[topicHash(topic)%uint64(len(gs))]]
	}
	r.pl.RUnlock()
	if g == nil || !g.local {
		return "", false // a replica relays to its own group's leader only (viaReplica otherwise)
	}
	ro, known := r.d.Role(g.id)
	if !known || ro.Lead == 0 || ro.Lead == r.id || ro.Moving {
		return "", false
	}
	for _, m := range g.replicas {
		if m.id == ro.Lead {
			owner = m.name
		}
	}
	if owner == "" || !r.reachable(owner) {
		return "", false
	}
	if !r.askAhead(ctx, topic) {
		return "", false
	}
	r.predicted.Add(1)
	return owner, true
}

// askAhead asks the metadata leader to place topic without waiting for the answer: the
// group's leader the publish goes to waits for the placement (and asks again itself when it
// does not come: relayedAskDelay). False when no metadata leader is known.
func (r *replicated) askAhead(ctx context.Context, topic string) bool {
	switch lead := r.leaderID(ctx, metaGroup); {
	case lead == 0:
		return false
	case lead == r.id:
		return r.place(ctx, topic, 0) == nil
	default:
		_ = r.askBatched(lead, topic) // buffered: the answer is dropped
		return true
	}
}

// relayedAskDelay is how long a publish relayed by another metadata member waits for the
// placement its sender asked for (a predicted relay, or a sender that read the placement
// first) before this node asks the metadata leader itself: a second ask per topic would
// double what a creation costs, and is needed only when the first was lost (a metadata
// leader change).
func (r *replicated) relayedAskDelay(from string) time.Duration {
	if !r.n.cfg.Raft.PredictPlacement {
		return 0 // the senders of this region read a placement before relaying, as before
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.mu.ids[from]
	if !ok {
		return 0
	}
	for _, v := range r.mu.voters {
		if v == id {
			return r.slowPoll()
		}
	}
	for _, v := range r.mu.learners {
		if v == id {
			return r.slowPoll()
		}
	}
	return 0 // a node outside the metadata group relays to a voter without asking (viaVoter)
}

// unplacedLed is, in the broken build only (proposeUnplaced), topic as placed on the group
// this node predicts for it, when it leads that group: nil otherwise.
func (r *replicated) unplacedLed(topic string) *repTopic {
	if !proposeUnplaced || r.placed(topic) {
		return nil
	}
	r.pl.RLock()
	var g *repGroup
	if gs := r.pl.many[r.n.cfg.Replicas]; len(gs) > 0 {
		g = r.pl.groups[gs[topicHash(topic)%uint64(len(gs))]]
	}
	r.pl.RUnlock()
	if g == nil || !g.local {
		return nil
	}
	if ro, _ := r.d.Role(g.id); !ro.Leader {
		return nil
	}
	return &repTopic{name: topic, group: g.id, replicas: g.replicas, boot: g.boot, local: true}
}
