package federation

import "sync"

// recentMovesBound is how many head moves recentMoves remembers: at issue 34's figure 2 rate
// (1,000 records/s over random topics), the last 4 s before a link comes back.
const recentMovesBound = 4096

// recentMoves remembers the topics whose heads records first published in this region
// moved last, up to recentMovesBound moves. A catalog stream to a peer of another region
// announces them, the most recent first, ahead of its listing (serveCatalog): after a cut,
// the topics that moved just before the link came back are mirrored first instead of when
// the listing reaches their names (issue 34's figure 2: the records sent between the return
// and the reconnect made the p99 of the catch-up, 1.9 s at 30,000 topics). The log calls add
// on every advance, under its own lock: add takes a small lock and never blocks.
type recentMoves struct {
	mu struct {
		sync.Mutex
		ring []recentMove      // the last moves; move seq is at ring[seq%len(ring)]
		seq  uint64            // the last move's
		last map[string]uint64 // topic -> seq of its last move still in ring
	}
}

type recentMove struct {
	topic string
	seq   uint64
}

func newRecentMoves(bound int) *recentMoves {
	r := &recentMoves{}
	r.mu.ring = make([]recentMove, bound)
	r.mu.last = make(map[string]uint64)
	return r
}

// add notes a move of topic's head (wal.Log.WatchAdvances); a move of mirrored records
// only is not one a peer is served (movedSet.add).
func (r *recentMoves) add(topic string, local bool) {
	if !local {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.seq++
	e := &r.mu.ring[r.mu.seq%uint64(len(r.mu.ring))]
	if e.topic != "" && r.mu.last[e.topic] == e.seq {
		delete(r.mu.last, e.topic) // its last move leaves the ring
	}
	*e = recentMove{topic: topic, seq: r.mu.seq}
	r.mu.last[topic] = r.mu.seq
}

// newest returns up to n of the topics remembered, the most recently moved first, each once.
func (r *recentMoves) newest(n int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	size := uint64(len(r.mu.ring))
	out := make([]string, 0, min(n, len(r.mu.last)))
	for s := r.mu.seq; s > 0 && r.mu.seq-s < size && len(out) < n; s-- {
		e := r.mu.ring[s%size]
		if r.mu.last[e.topic] == e.seq { // else it moved again since: listed at that move
			out = append(out, e.topic)
		}
	}
	return out
}
