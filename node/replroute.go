package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/replica"
	"github.com/quicmq/quicmq/routing"
	"go.etcd.io/raft/v3"
)

// Where a request for a replicated topic goes: its group's leader, found from raft's status
// or asked of a replica, with the errors that name what is missing (a quorum, a leader).

// leaderID is the group's leader as this node knows it (0: none).
func (r *replicated) leaderID(ctx context.Context, group uint64) uint64 {
	if ro, ok := r.d.Role(group); ok {
		return ro.Lead
	}
	st, err := r.d.Status(ctx, group)
	if err != nil {
		return 0
	}
	return st.Lead
}

// reachable reports whether node name of the region can be reached now.
func (r *replicated) reachable(name string) bool {
	n := r.n
	return name == n.cfg.Name || (n.place.MemberStatus(name) == gossip.StatusAlive && n.fed.Connected(name))
}

// lacking names t's replicas that this node cannot reach.
func (r *replicated) lacking(t *repTopic) []string {
	var out []string
	for _, m := range t.replicas {
		if !r.reachable(m.name) {
			out = append(out, m.name)
		}
	}
	return out
}

func (r *replicated) noQuorum(t *repTopic, what string) *wire.Error {
	lack := r.lacking(t)
	missing := "none: the replicas are reachable but did not elect a leader in time"
	if len(lack) > 0 {
		missing = strings.Join(lack, ", ")
	}
	return wire.Errorf(wire.CodeUnavailable,
		"topic %q (replicas %s of region %q) %s within %v: it needs a quorum of %d of its %d replicas; replicas this node cannot reach: %s",
		t.name, strings.Join(t.names(), ", "), r.n.cfg.Region, what, r.n.cfg.Raft.QuorumTimeout, len(t.replicas)/2+1, len(t.replicas), missing)
}

// waitLeader returns the raft ID of t's leader, waiting up to QuorumTimeout for one.
func (r *replicated) waitLeader(ctx context.Context, t *repTopic) (uint64, *wire.Error) {
	n := r.n
	if !t.local {
		// A replica moved here votes, and may lead, before this node applies the move's
		// done record (the metadata leader records it after raft's change; a learner of
		// the metadata group applies it last): raft's own view decides. A publish relayed
		// here by a node that takes this one for the leader is appended when raft says
		// this node leads, and otherwise goes on to the leader raft names here (route),
		// as on any replica, instead of being refused.
		if lead, ok := r.leadNow(t); ok {
			return lead, nil
		}
		return 0, wire.Errorf(wire.CodeUnavailable, "topic %q: this node is not one of its replicas (%s)", t.name, strings.Join(t.names(), ", "))
	}
	// The leader as of the group's last round, without waiting for the driver (a round
	// may be in its fsync): what every publish asks.
	// A leader handing its leadership over (node/relocate) refuses proposals: wait for the new one.
	if lead, ok := r.leadNow(t); ok {
		return lead, nil
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Raft.QuorumTimeout)
	defer cancel()
	poll := time.NewTicker(n.cfg.Raft.TickInterval)
	defer poll.Stop()
	woken := uint64(0)
	for {
		st, err := r.d.Status(ctx, t.group)
		if err == nil && st.Lead != 0 && st.Lead != r.id && st.Lead != woken && !r.reachable(r.leadName(t, st.Lead)) {
			// A quiet group does not notice its leader's loss by itself.
			woken = st.Lead
			_ = r.d.WakeLedBy(ctx, st.Lead)
		}
		// A leader this node cannot reach (its node failed, its link is down) is as good as
		// none: a new one is elected within an election timeout, or there is no quorum.
		if err == nil && st.Lead != 0 && (st.Lead == r.id) == (st.RaftState == raft.StateLeader) && st.LeadTransferee == 0 &&
			(st.Lead == r.id || r.reachable(r.leadName(t, st.Lead))) {
			return st.Lead, nil
		}
		if errors.Is(err, replica.ErrStopped) {
			return 0, wire.Errorf(wire.CodeShuttingDown, "node shutting down")
		}
		select {
		case <-poll.C:
		case <-ctx.Done():
			return 0, r.noQuorum(t, "has no leader")
		}
	}
}

// leadNow is t's leader as of its group's last round, without waiting for the driver (a
// round may be in its fsync): what every publish asks. ok is false when there is none a
// publish may go to now: none known, one handing its leadership over (node/relocate: it
// refuses proposals), or one this node cannot reach.
func (r *replicated) leadNow(t *repTopic) (uint64, bool) {
	if ro, ok := r.d.Role(t.group); ok && ro.Lead != 0 && (ro.Lead == r.id) == ro.Leader && !ro.Moving &&
		(ro.Lead == r.id || r.reachable(r.leadName(t, ro.Lead))) {
		return ro.Lead, true
	}
	return 0, false
}

// route decides where a publish to a replicated topic goes: "" for this node (it leads the
// topic's group), or the leader's node name. A publish relayed here goes on only to the
// leader this node knows; one relayed by the node this one takes for the leader is refused,
// with that node's name, for the publisher to route again (rerouteRoute).
func (r *replicated) route(ctx context.Context, topic string, relayed bool, from string) (string, *wire.Error) {
	owner, e, _ := r.routeWith(ctx, topic, relayed, from, false)
	return owner, e
}

// routeNow is route when it answers without waiting: ok is false when topic is not placed
// here yet or its group's leader is not known now (route would wait for them).
func (r *replicated) routeNow(ctx context.Context, topic string, relayed bool, from string) (owner string, e *wire.Error, ok bool) {
	return r.routeWith(ctx, topic, relayed, from, true)
}

// routeWith is route, or routeNow when noWait.
func (r *replicated) routeWith(ctx context.Context, topic string, relayed bool, from string, noWait bool) (string, *wire.Error, bool) {
	if noWait {
		t := r.lookup(topic)
		if t == nil {
			return "", nil, false
		}
		if _, ok := r.leadNow(t); t.local && !ok {
			return "", nil, false
		}
	}
	owner, e := r.routeOnce(ctx, topic, relayed, from)
	return owner, e, true
}

func (r *replicated) routeOnce(ctx context.Context, topic string, relayed bool, from string) (string, *wire.Error) {
	if !relayed {
		if v, outside, e := r.viaVoter(topic); outside {
			return v, e
		}
	}
	if relayed && r.unplacedLed(topic) != nil {
		return "", nil // the broken build only (predict_broken.go)
	}
	pa := &placeAsk{topic: topic}
	if relayed {
		// The sender asked for the placement (or read it): asked here only if it does not come.
		pa.askAfter = time.Now().Add(r.relayedAskDelay(from))
	}
	t, e := r.ensurePlaced(ctx, pa)
	if e != nil {
		return "", e
	}
	switch {
	case !t.local && !relayed:
		// Placed on other nodes of the region (one larger than Replicas): a replica passes
		// the publish on to its leader (below, on that replica).
		return r.viaReplica(t)
	case !t.local && !r.holdsGroup(t.group):
		// Relayed by a node that predicted this one leads the topic's group (replpredict.go),
		// but the placement put it on a group this node holds no replica of: the batch is
		// routed again off the reader (as when the leadership just moved) to one of its
		// replicas, the sender included. (A replica moved here that this node's metadata
		// does not list yet holds the group: waitLeader decides, below.)
		via, e := r.viaReplica(t)
		if e != nil {
			return "", e
		}
		return via, wire.Errorf(wire.CodeUnavailable, "node %q was asked to append to %q, which is placed on %s: nothing was appended; retry",
			r.n.cfg.Name, topic, strings.Join(t.names(), ", "))
	}
	lead, e := r.waitLeader(ctx, t)
	switch {
	case e != nil:
		return "", e
	case lead == r.id:
		return "", nil
	case relayed && r.leadName(t, lead) == from:
		// The sender took this node for the leader and this node takes the sender for it:
		// the leadership just moved, most often to the sender, which by now knows it (it
		// won the election before this node heard of it). The publisher routes the batch
		// again off its reader (reroute); from is returned with the refusal for that.
		return from, wire.Errorf(wire.CodeUnavailable,
			"node %q was asked to append to %q but node %q leads its group as far as it knows: the leader just changed; nothing was appended; retry", r.n.cfg.Name, topic, from)
	case relayed:
		// Relayed by a node that holds no replica of the topic or has not read its placement
		// yet (viaVoter, viaReplica), or whose view of the leader is older: passed on once
		// more, never back to the sender.
	}
	return r.leadName(t, lead), nil
}

// holdsGroup reports whether this node's driver runs a replica of group: a replica moved
// here does before its node applies the move's done record.
func (r *replicated) holdsGroup(group uint64) bool {
	_, ok := r.d.Role(group)
	return ok
}

// leadName is the name of the node with raft ID id, a leader of t's group: one of t's
// replicas, or, when this node has not applied the record of a move that put id's replica
// in the group yet (raft promotes it before the metadata leader records the move done),
// the region member that announces id. "" when neither knows it (unreachable, then).
func (r *replicated) leadName(t *repTopic, id uint64) string {
	if name := t.nameOf(id); name != "" {
		return name
	}
	return r.memberName(id)
}

// routePublish is route for a batch of publishes read from a client: one to a topic this
// node has not read the placement of goes at once to the leader its group will most likely
// have, which waits for the placement (replpredict.go).
func (r *replicated) routePublish(ctx context.Context, topic string, relayed bool, from string) (string, *wire.Error) {
	if !relayed && !r.placed(topic) {
		if _, outside, _ := r.viaVoter(topic); !outside {
			if owner, ok := r.predictRoute(ctx, topic); ok {
				return owner, nil
			}
		}
	}
	return r.route(ctx, topic, relayed, from)
}

// rerouteRoute is route for a batch a leadership move refused (publisher.reroute), or one
// relayed here by the node this one takes for the leader: it may go back to that node.
// Raft lets two nodes take each other for the leader only until the later term reaches
// both (a round trip: the sender won an election this node heard of first, or the
// reverse), so a batch goes back and forth at most a few times; a bound of
// maxSentBack batches per topic and sender within QuorumTimeout keeps a region whose
// views disagree longer (a bug) from passing batches round and round: past it they are
// refused.
func (r *replicated) rerouteRoute(ctx context.Context, topic string, relayed bool, from string) (string, *wire.Error) {
	owner, e := r.route(ctx, topic, relayed, from)
	if e == nil || owner == "" || !relayed {
		return owner, e
	}
	key := topic + "\x00" + from
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	sb := r.mu.sentBack[key]
	if now.Sub(sb.since) > r.n.cfg.Raft.QuorumTimeout {
		sb = sentBack{since: now}
	}
	if sb.count >= maxSentBack {
		return "", e
	}
	sb.count++
	if r.mu.sentBack == nil || len(r.mu.sentBack) > 1024 {
		r.mu.sentBack = map[string]sentBack{} // bounded: what a flapping region leaves here
	}
	r.mu.sentBack[key] = sb
	return owner, nil
}

// maxSentBack bounds the batches of one topic relayed back to one sender within
// QuorumTimeout (rerouteRoute).
const maxSentBack = 256

type sentBack struct {
	since time.Time
	count int
}

// viaVoter returns, on a node outside its region's metadata group (which holds no
// replicated topic), a reachable metadata voter to relay a request for topic to; outside is
// false on a voter or while the region forms.
func (r *replicated) viaVoter(topic string) (voter string, outside bool, e *wire.Error) {
	r.mu.Lock()
	voters := slices.Clone(r.mu.outside)
	r.mu.Unlock()
	t := r.lookup(topic)
	if voters == nil || t != nil && t.local {
		return "", false, nil // a learner catching up serves the replicas it opened already
	}
	// Spread the region's outside nodes over the voters, the same voter for a topic.
	for _, name := range rotate(voters, topic) {
		if r.reachable(name) {
			return name, true, nil
		}
	}
	return "", true, wire.Errorf(wire.CodeUnavailable,
		"topic %q: none of the nodes of region %q that hold its replicated topics (%s) can be reached from node %q",
		topic, r.n.cfg.Region, strings.Join(voters, ", "), r.n.cfg.Name)
}

// viaReplica returns a reachable replica of t, a topic placed on other nodes of this region,
// to relay a request to: the same one for a topic while it is reachable.
func (r *replicated) viaReplica(t *repTopic) (string, *wire.Error) {
	for _, name := range rotate(t.names(), t.name) {
		if r.reachable(name) {
			return name, nil
		}
	}
	return "", wire.Errorf(wire.CodeUnavailable, "topic %q: none of its replicas (%s) can be reached from node %q",
		t.name, strings.Join(t.names(), ", "), r.n.cfg.Name)
}

// remoteLeader asks t's replicas (a topic placed on other nodes of this region) which node
// leads its group, over a peer stream (TOPICS, answered with TOPIC_INFO), the first answer
// naming a leader winning.
func (r *replicated) remoteLeader(ctx context.Context, t *repTopic) (string, *wire.Error) {
	n := r.n
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Raft.QuorumTimeout)
	defer cancel()
	var errs []string
	for _, name := range rotate(t.names(), t.name) {
		if !r.reachable(name) {
			errs = append(errs, name+": unreachable")
			continue
		}
		lead := ""
		err := n.streamTo(ctx, name, &wire.Topics{Pattern: t.name}, func(f wire.Frame) error {
			if ti, ok := f.(*wire.TopicInfo); ok && ti.Name == t.name {
				lead = ti.Leader
			}
			return nil
		})
		switch {
		case err != nil:
			errs = append(errs, fmt.Sprintf("%s: %v", name, err))
		case lead == "":
			errs = append(errs, name+": knows no leader")
		default:
			return lead, nil
		}
	}
	return "", wire.Errorf(wire.CodeUnavailable, "topic %q: no replica of it (%s) named its leader to node %q: %s",
		t.name, strings.Join(t.names(), ", "), n.cfg.Name, strings.Join(errs, "; "))
}

// rotate orders names by rendezvous weight for topic.
func rotate(names []string, topic string) []string {
	first := routing.Owner(topic, names)
	i := slices.Index(names, first)
	return append(slices.Clone(names[i:]), names[:i]...)
}

// leaderName is the node leading topic's group as far as this node knows ("" if none).
func (r *replicated) leaderName(topic string) string {
	t := r.lookup(topic)
	if t == nil {
		return ""
	}
	r.mu.Lock()
	st, ok := r.mu.status[t.group]
	r.mu.Unlock()
	if !ok {
		return ""
	}
	return t.nameOf(st.Lead)
}

// subscribeOwner decides where a client's subscription to a replicated topic is served:
// "" here (any replica serves reads up to what it applied), or the leader's node for a
// durable consumer (its positions are proposed by the leader).
func (r *replicated) subscribeOwner(ctx context.Context, topic string, durable bool) (string, *wire.Error) {
	if v, outside, e := r.viaVoter(topic); outside {
		return v, e
	}
	t, e := r.ensure(ctx, topic, false)
	if e != nil {
		return "", e
	}
	if !durable && t.local {
		return "", nil
	}
	if !t.local {
		// Placed on other nodes of the region: any replica serves reads, the leader a
		// durable consumer (its positions are proposed there), which this node, outside
		// the topic's group, learns from a replica.
		if !durable {
			return r.viaReplica(t)
		}
		return r.remoteLeader(ctx, t)
	}
	lead, e := r.waitLeader(ctx, t)
	if e != nil {
		return "", e
	}
	if lead == r.id {
		return "", nil
	}
	return t.nameOf(lead), nil
}

// holders returns the leader and replicas of a topic for listings.
func (r *replicated) holders(topic string) (leader string, replicas []string) {
	t := r.lookup(topic)
	if t == nil {
		return "", nil
	}
	if t.local {
		ctx, cancel := context.WithTimeout(context.Background(), r.n.cfg.Raft.ObserveInterval)
		defer cancel()
		if st, err := r.d.Status(ctx, t.group); err == nil {
			return t.nameOf(st.Lead), t.names()
		}
	}
	return r.leaderName(topic), t.names()
}
