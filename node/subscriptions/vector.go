package subscriptions

import (
	"maps"
	"sync"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/vector"
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

// vectorResume is where the cursor on topic starts when the request's vector names it, and
// whether it does. Run goroutine.
func (sub *Subscription) vectorResume(topic string) (uint64, bool, *wire.Error) {
	v, ok := sub.vec.want[topic]
	n := sub.h
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
			return 0, false, wire.Errorf(wire.CodeInternal, "read the positions of %q on %q: %v", d, sub.actor.ClientName(topic), err)
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
		return 0, false, wire.Errorf(wire.CodeInternal, "find the vector position of topic %q: %v", sub.actor.ClientName(topic), err)
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
func (sub *Subscription) beginStored(topic string, start uint64, stored bool) {
	if sub.req.Durable == "" {
		return
	}
	n := sub.h
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
func (sub *Subscription) ackedVector(topic string, off uint64) map[string]uint64 {
	vs := &sub.vec
	vs.mu.Lock()
	av := vs.mu.acked[topic]
	vs.mu.Unlock()
	if av == nil {
		return nil
	}
	n := sub.h
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
