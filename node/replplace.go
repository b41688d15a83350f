package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/routing"
)

// Placing a replicated topic on a group of the region: created on first use through the
// metadata leader (asked over a link when this node does not lead), batched.

// ensure returns topic's placement, having the metadata leader decide it when the topic is
// new. relayed: the request came from another node, so it is not passed on again.
func (r *replicated) ensure(ctx context.Context, topic string, relayed bool) (*repTopic, *wire.Error) {
	return r.ensureReplicas(ctx, topic, relayed, 0)
}

// ensureReplicas is ensure placing a new topic on replicas nodes (0: the region's
// --replicas). A topic placed already is returned whatever its count: the caller compares.
func (r *replicated) ensureReplicas(ctx context.Context, topic string, relayed bool, replicas int) (*repTopic, *wire.Error) {
	return r.ensurePlaced(ctx, &placeAsk{topic: topic, relayed: relayed, replicas: replicas})
}

// ensurePlaced is ensureReplicas for the request pa describes.
func (r *replicated) ensurePlaced(ctx context.Context, pa *placeAsk) (*repTopic, *wire.Error) {
	topic, relayed := pa.topic, pa.relayed
	if t := r.lookup(topic); t != nil {
		return t, nil // every publish asks: no context or timer for a topic placed
	}
	n := r.n
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Raft.QuorumTimeout)
	defer cancel()
	// Until the topic is asked for, every change of the region is looked at and the state
	// polled each tick; once asked, only its own placement (placedCh), the ask's answer and,
	// at an election's pace, a change of metadata leader wake it: thousands of creations
	// wait at once, and each metadata record applied or tick would wake them all (replask.go).
	poll := time.NewTimer(n.cfg.Raft.TickInterval)
	defer poll.Stop()
	var askDone <-chan *wire.Error // the batched ask's answer (replask.go)
	waited := false                // placedCh made for topic: forgotten when this gives up
	defer func() {
		if waited && !r.placed(topic) {
			r.unwaitPlaced(topic)
		}
	}()
	asked, askedLead := false, uint64(0)
	for {
		r.mu.Lock()
		formed, changed := r.mu.formed, r.mu.changed
		outside, forming := r.mu.outside, r.mu.forming
		r.mu.Unlock()
		if t := r.lookup(topic); t != nil {
			return t, nil
		}
		if !formed && outside != nil {
			return nil, wire.Errorf(wire.CodeUnavailable,
				"topic %q: node %q is not one of the %d nodes of region %q that hold its replicated topics (%s): connect to one of them",
				topic, n.cfg.Name, len(outside), n.cfg.Region, strings.Join(outside, ", "))
		}
		if asked && r.leaderID(ctx, metaGroup) != askedLead {
			asked = false // the leader asked lost its office before placing the topic: ask again
		}
		early := time.Until(pa.askAfter) // a relayed publish whose sender asked (replpredict.go)
		if formed && !asked && early <= 0 {
			var e *wire.Error
			var answer <-chan *wire.Error
			if asked, askedLead, answer, e = r.askToPlace(ctx, pa); e != nil {
				return nil, e
			}
			if answer != nil {
				askDone = answer
			}
		}
		var wake <-chan struct{} = changed
		every := n.cfg.Raft.TickInterval
		if formed && (asked || relayed || early > 0) {
			// relayed: the sender read the placement or asked this node as the leader; it
			// is applied here soon. early: the sender asked for it.
			wake, every, waited = r.placedCh(topic), r.slowPoll(), true
			if !asked && early > 0 {
				every = early
			}
		}
		poll.Reset(every)
		select {
		case <-wake:
		case e := <-askDone:
			askDone = nil
			switch {
			case e == nil: // placed on the leader: applied here soon (placedCh)
			case e.Code != wire.CodeUnavailable:
				return nil, e
			default:
				pa.lastErr, asked = e, false // asked again, of the leader then known
			}
		case <-poll.C:
		case <-ctx.Done():
			if pa.lastErr != nil && !r.placed(topic) {
				return nil, pa.lastErr
			}
			if !formed {
				return nil, wire.Errorf(wire.CodeUnavailable,
					"topic %q: region %q keeps %d replicas of each topic and has %d node(s) with raft IDs alive (%s): its replicated topics are unavailable until %d are",
					topic, n.cfg.Region, n.cfg.Replicas, len(forming), strings.Join(forming, ", "), n.cfg.Replicas)
			}
			return nil, r.notPlacedError(topic)
		}
	}
}

// notPlacedError is the refusal of a publish or creation whose topic the formed region's
// metadata group did not place within QuorumTimeout.
func (r *replicated) notPlacedError(topic string) *wire.Error {
	return wire.Errorf(wire.CodeUnavailable,
		"topic %q: region %q's metadata group did not place it within %v (no quorum of its nodes: %s); retry",
		topic, r.n.cfg.Region, r.n.cfg.Raft.QuorumTimeout, r.metaLacking())
}

// placeAsk is what ensureReplicas remembers of its requests to place a topic.
type placeAsk struct {
	topic    string
	relayed  bool
	replicas int
	// notLeader: relayed, when this node first found it does not lead the metadata.
	notLeader time.Time
	// lastErr is the last refusal of a metadata leader asked, told at the timeout.
	lastErr *wire.Error
	// askAfter: the placement is waited for until then before this node asks for it (a
	// publish relayed by a node that asked: relayedAskDelay).
	askAfter time.Time
}

// askToPlace asks the metadata leader to place the topic: this node, when it leads (placed
// at once); the leader, in a batch of many topics (replicas 0) or alone. asked is true once
// a request is under way, with the leader asked and, for a batched one, where its answer
// comes. A non-nil error ends the wait; a leader that changed under the request is asked
// again at the next poll.
func (r *replicated) askToPlace(ctx context.Context, pa *placeAsk) (asked bool, lead uint64, answer <-chan *wire.Error, e *wire.Error) {
	n := r.n
	switch lead = r.leaderID(ctx, metaGroup); {
	case lead == r.id:
		if e := r.place(ctx, pa.topic, pa.replicas); e != nil {
			return false, 0, nil, e
		}
		return true, lead, nil, nil
	case lead != 0 && pa.relayed:
		// Asked by a node that took this one for the metadata leader, or by one that has
		// read the topic's placement and relays to this node as the leader of its group (a
		// retention to store), which may not have read it yet: the placement is waited for
		// a little, then the sender is told to ask again.
		if pa.notLeader.IsZero() {
			pa.notLeader = time.Now()
		}
		if time.Since(pa.notLeader) > n.cfg.Raft.TickInterval*time.Duration(n.cfg.Raft.ElectionTicks) {
			return false, 0, nil, wire.Errorf(wire.CodeUnavailable, "topic %q: node %q no longer leads region %q's metadata; retry", pa.topic, n.cfg.Name, n.cfg.Region)
		}
	case lead != 0 && pa.replicas == 0:
		return true, lead, r.askBatched(lead, pa.topic), nil // many topics per stream to the leader
	case lead != 0:
		e := r.askPlace(ctx, lead, pa.topic, pa.replicas)
		switch {
		case e == nil:
			return true, lead, nil, nil
		case e.Code != wire.CodeUnavailable:
			return false, 0, nil, e
		default:
			pa.lastErr = e
		}
	}
	return false, 0, nil, nil
}

// place decides topic's replica set on the metadata leader and proposes it.
func (r *replicated) place(ctx context.Context, topic string, replicas int) *wire.Error {
	n := r.n
	if replicas == 0 {
		replicas = n.cfg.Replicas
	}
	r.mu.Lock()
	members := append(slices.Clone(r.mu.voters), r.mu.learners...) // learners: nodes past the first Replicas
	r.mu.Unlock()
	if replicas > len(members) {
		return wire.Errorf(wire.CodeInvalidArgument, "topic %q: %d replicas asked, but region %q has %d nodes that hold replicated topics", topic, replicas, n.cfg.Region, len(members))
	}
	if r.manyGroups() {
		r.placeMany(topic, replicas) // replgroups.go: on a group of many topics
		return nil
	}
	r.pl.RLock()
	holdings := make(map[string][]string, len(r.pl.groups))
	for _, g := range r.pl.groups {
		holdings[g.label] = g.names()
	}
	r.pl.RUnlock()
	ids := make(map[string]uint64)
	var eligible []routing.PlacementMember
	for _, m := range r.raftMembers() {
		if !slices.Contains(members, m.id) {
			continue
		}
		ids[m.name] = m.id
		eligible = append(eligible, routing.PlacementMember{ID: m.name, Eligible: m.alive})
	}
	p := routing.Place(eligible, holdings, []routing.PlacementRequest{{Topic: topic, Replicas: replicas}})[0]
	if p.Err != nil {
		return wire.Errorf(wire.CodeUnavailable, "topic %q: %v", topic, p.Err)
	}
	t := &repTopic{name: topic, group: topicGroup(topic)}
	for _, name := range p.Replicas {
		t.replicas = append(t.replicas, repMember{name: name, id: ids[name]})
	}
	if _, err := r.d.Propose(ctx, metaGroup, encodePlacement(t)); err != nil {
		return wire.Errorf(wire.CodeUnavailable, "topic %q: placing it through region %q's metadata group: %v; retry", topic, n.cfg.Region, err)
	}
	return nil
}

// askPlace asks the metadata leader (raft ID lead) to place topic, over a peer stream
// (TOPIC_CREATE, answered by TOPIC_INFO: docs/protocol.md, replicated regions).
func (r *replicated) askPlace(ctx context.Context, lead uint64, topic string, replicas int) *wire.Error {
	n := r.n
	name := ""
	for _, m := range r.raftMembers() {
		if m.id == lead {
			name = m.name
		}
	}
	if name == "" {
		return nil // not known yet in gossip: the caller waits and asks again
	}
	err := n.streamTo(ctx, name, &wire.TopicCreate{Topic: topic, Replicas: uint64(replicas)}, func(f wire.Frame) error {
		if _, ok := f.(*wire.TopicInfo); !ok {
			return fmt.Errorf("unexpected %s", f.Type())
		}
		return nil
	})
	var we *wire.Error
	if errors.As(err, &we) && we.Code == wire.CodeInvalidArgument {
		return we // the request's own fault (a replica count the region cannot give): as the leader said it
	}
	if err != nil {
		return wire.Errorf(wire.CodeUnavailable, "topic %q: the leader of region %q's metadata, node %q, did not place it: %v", topic, n.cfg.Region, name, err)
	}
	return nil
}

// placeLater has the metadata group place topic, on a goroutine of its own (one per topic
// at a time).
func (r *replicated) placeLater(topic string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.stopped || r.mu.wg == nil || r.mu.placing[topic] || !r.mu.formed {
		return
	}
	r.mu.placing[topic] = true
	ctx := r.mu.ctx
	r.mu.wg.Add(1)
	go func() {
		defer r.mu.wg.Done()
		if _, e := r.ensure(ctx, topic, false); e != nil {
			r.n.log.Debug("placing a topic to mirror", "topic", topic, "err", e.Message)
		}
		r.mu.Lock()
		delete(r.mu.placing, topic)
		r.mu.Unlock()
	}()
}

// holdsAll reports whether this node is one of its region's metadata voters, which hold
// every replicated topic (placement draws replica sets from them): a listing then needs no
// other node. False on a nil receiver.
func (r *replicated) holdsAll() bool {
	if r == nil {
		return false
	}
	r.pl.RLock()
	narrow := r.pl.narrow
	r.pl.RUnlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.formed && len(r.mu.voters) == r.n.cfg.Replicas && len(r.mu.learners) == 0 && narrow == 0 && slices.Contains(r.mu.voters, r.id)
}
