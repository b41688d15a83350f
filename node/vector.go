package node

import (
	"maps"
	"sync"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"
	"github.com/quicmq/quicmq/node/vector"
	"github.com/quicmq/quicmq/routing"
)

// A subscription's side of portable positions (node/vector says what they are): resuming
// after a request's vector, and storing a durable's vector with its position.

// vectorState is a subscription's use of vectors: the request's vectors by topic (read-only
// after set-up) and, for a durable, the vector of what it acknowledged per topic (owned by
// the ack reader; begun by the run goroutine as topics are added).
type vectorState struct {
	// want is, per topic (the node's name), the vector the cursor resumes after: the
	// request's, or a durable's mirrored one (mirroredVector). Run goroutine.
	want map[string]map[string]uint64

	mu struct {
		sync.Mutex
		acked map[string]*ackVector
	}
}

// ackVector is the vector of a durable on one topic: every record below at is accounted for in
// vec; vec is nil until it was computed.
type ackVector struct {
	at  uint64
	vec map[string]uint64
}

// checkVector validates a SUBSCRIBE's vector block (client names) for principal p, on a node
// of region: a subscription relayed by a sibling of the region (region set to its own) takes
// one as a client's does.
func checkVector(p *auth.Principal, region string, req *wire.Subscribe) *wire.Error {
	if req.Vector == nil {
		return nil
	}
	switch {
	case req.Group != nil:
		return wire.Errorf(wire.CodeInvalidArgument, "a vector position is not taken by a group member (group %q): groups keep their positions on the node", req.Group.Name)
	case req.Region != "" && req.Region != region && req.Region != ablationSharedRegion:
		return wire.Errorf(wire.CodeInvalidArgument, "a vector position applies to this region's log, not to a replay of region %q", req.Region)
	}
	for _, tv := range req.Vector {
		if e := p.CheckTopic(tv.Topic, false); e != nil {
			return wire.Errorf(e.Code, "vector position of topic %q: %s", tv.Topic, e.Message)
		}
		if !routing.Match(req.Pattern, tv.Topic) {
			return wire.Errorf(wire.CodeInvalidArgument, "vector position of topic %q: the pattern %q does not match it", tv.Topic, req.Pattern)
		}
	}
	return nil
}

// namespaceVector is v with p's namespace added to its topics.
func namespaceVector(p *auth.Principal, v []wire.TopicVector) []wire.TopicVector {
	if v == nil {
		return nil
	}
	out := make([]wire.TopicVector, len(v))
	for i, tv := range v {
		out[i] = wire.TopicVector{Topic: p.Topic(tv.Topic), Origins: tv.Origins}
	}
	return out
}

// vectorResume is where the cursor on topic starts when the request's vector names it, and
// whether it does. Run goroutine.
func (sub *subscription) vectorResume(topic string) (uint64, bool, *wire.Error) {
	v, ok := sub.vec.want[topic]
	n := sub.s.n
	if d := sub.req.Durable; d != "" {
		// A durable's positions only move forward: the request's vector is raised to cover
		// what the durable acknowledged as this node knows it, its own vector and those
		// mirrored here newer than it (a client that moved brings only what it delivered).
		dv, dok, err := vector.Mirrored(n.wal, n.cfg.Region, d, topic)
		if err == nil && ok && !dok {
			_, dv, _, err = n.wal.PositionVector(d, topic)
			dok = dv != nil
		}
		if err != nil {
			return 0, false, wire.Errorf(wire.CodeInternal, "read the positions of %q on %q: %v", d, sub.s.actor.ClientName(topic), err)
		}
		switch {
		case ok && dok:
			v = maps.Clone(v)
			for o, off := range dv {
				if last, has := v[o]; !has || off > last {
					v[o] = off
				}
			}
		case dok:
			v, ok = dv, true
		}
	}
	if !ok {
		return 0, false, nil
	}
	if sub.vec.want == nil {
		sub.vec.want = make(map[string]map[string]uint64)
	}
	sub.vec.want[topic] = v // the cursor skips what it covers
	start, err := vector.Start(n.wal, n.cfg.Region, topic, v)
	if err != nil {
		return 0, false, wire.Errorf(wire.CodeInternal, "find the vector position of topic %q: %v", sub.s.actor.ClientName(topic), err)
	}
	if sub.req.Durable != "" {
		sub.vec.begin(topic, start, maps.Clone(v))
	}
	return start, true, nil
}

// skip is the vector whose records the cursor on topic skips, nil for none.
func (vs *vectorState) skip(topic string) map[string]uint64 { return vs.want[topic] }

// begin sets where a durable's acknowledged vector on topic starts: every record below at is
// in vec (nil: not known yet, computed at the first store). Run goroutine, at a topic's set-up.
func (vs *vectorState) begin(topic string, at uint64, vec map[string]uint64) {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	if vs.mu.acked == nil {
		vs.mu.acked = make(map[string]*ackVector)
	}
	if _, ok := vs.mu.acked[topic]; !ok {
		vs.mu.acked[topic] = &ackVector{at: at, vec: vec}
	}
}

// beginStored begins a durable's vector on topic from what is stored there (its stored
// vector, or none), or from the start offset of a consumer without a position: a start at
// the first retained record has acknowledged nothing before it. Run goroutine.
func (sub *subscription) beginStored(topic string, start uint64, stored bool) {
	if sub.req.Durable == "" {
		return
	}
	n := sub.s.n
	if stored {
		if _, vec, ok, err := n.wal.PositionVector(sub.req.Durable, topic); err == nil && ok && vec != nil {
			sub.vec.begin(topic, start, vec)
			return
		}
	} else if first, _, _ := n.wal.Bounds(topic); start <= first {
		sub.vec.begin(topic, start, map[string]uint64{})
		return
	}
	sub.vec.begin(topic, start, nil)
}

// ackedVector returns the vector of the durable's records of topic acknowledged up to off, to
// store with its position; nil when it cannot be computed (the position is then stored
// without one, as before vectors). Ack reader.
func (sub *subscription) ackedVector(topic string, off uint64) map[string]uint64 {
	vs := &sub.vec
	vs.mu.Lock()
	av := vs.mu.acked[topic]
	vs.mu.Unlock()
	if av == nil {
		return nil
	}
	n := sub.s.n
	if av.vec == nil || off+1 < av.at {
		vec, err := vector.Prefix(n.wal, n.cfg.Region, topic, min(av.at, off+1))
		if err != nil {
			n.log.Warn("durable position stored without its vector", "durable", sub.req.Durable, "topic", topic, "err", err)
			return nil
		}
		av.vec, av.at = vec, min(av.at, off+1)
	}
	at, err := vector.Advance(n.wal, n.cfg.Region, topic, av.vec, av.at, off)
	if err != nil {
		n.log.Warn("durable position stored without its vector", "durable", sub.req.Durable, "topic", topic, "err", err)
		return nil
	}
	av.at = at
	return maps.Clone(av.vec)
}
