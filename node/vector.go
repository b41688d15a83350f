package node

import (
	"errors"
	"maps"
	"strings"
	"sync"

	"github.com/quicmq/quicmq/federation"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"
	"github.com/quicmq/quicmq/routing"
	"github.com/quicmq/quicmq/wal"
)

// Portable positions (docs/architecture.md, "Portable positions").
//
// Every record carries its origin region and origin offset, and each origin's order is kept
// in every region's log (I7). So a position can be a vector {origin region -> last origin
// offset covered} that means the same in every region. Two things are done with it here:
//
//   - A SUBSCRIBE with a vector block (wire.SubscribeVector) resumes each topic it names
//     exactly after the vector: records of origin O with origin offset <= v[O] are skipped,
//     everything else is delivered, each origin in its order. The cursor starts at the first
//     record the vector does not cover (vectorStart) and skips the covered records after it
//     (vectorState.skip, applied as records are encoded).
//   - A durable consumer's position is stored with the vector of what it acknowledged
//     (wal v3 positions): the ack reader advances it over the records acknowledged since the
//     last store (advanceVector), so the stored vector is the per-origin maximum over the
//     acknowledged prefix of this region's log, merged with the vector it resumed from.
//
// Cost, without an index of (origin, origin offset) -> local offset: finding where a vector
// resumes reads the log backwards from the head until every origin the topic holds (this
// region, and each region with a mirror cursor on the topic) has shown a covered record: about
// as many records as the consumer is behind, plus the mirroring skew between regions. An
// origin the vector does not name (nothing of it covered) is settled only at the first
// retained record, so then the whole retained log is read once. Storing a durable's vector
// reads each acknowledged record once more (just delivered, so from Pebble's cache), and the
// first store of a durable whose position has no vector yet (stored before vectors, or
// starting past the first retained record) reads backwards like a resume.

// vectorChunk bounds the records one backward read takes; reads start small (a consumer near
// the head) and double up to it.
const (
	vectorChunkFirst = 256
	vectorChunkMax   = 4096
	vectorReadBytes  = 8 << 20
)

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

// covered reports whether vector v covers the record of origin (this region's when "") at
// originOff.
func covered(v map[string]uint64, origin, region string, originOff uint64) bool {
	if origin == "" {
		origin = region
	}
	last, ok := v[origin]
	return ok && originOff <= last
}

// originOf is the origin region of a record of this region's log.
func originOf(rec *wal.Record, region string) string {
	if rec.OriginRegion == "" {
		return region
	}
	return rec.OriginRegion
}

// topicOrigins returns the origin regions topic's log can hold, each with the highest origin
// offset it may hold: this region (below head) and each region with a mirror cursor on the
// topic (federation's "mirror/REGION": the last origin offset mirrored).
func topicOrigins(l *wal.Log, region, topic string, head uint64) (map[string]uint64, error) {
	origins := map[string]uint64{region: head - 1}
	err := l.Positions(wal.PositionFilter{NamePrefix: mirrorCursorPrefix, Topic: topic}, func(pi wal.PositionInfo) bool {
		if _, _, mirrored := federation.ParseMirroredPosition(pi.Name); pi.HasAcked && !mirrored {
			origins[strings.TrimPrefix(pi.Name, mirrorCursorPrefix)] = pi.Acked
		}
		return true
	})
	return origins, err
}

// scanBack calls fn for the records of topic below upTo, from the highest down, until fn
// returns false or the first retained record was passed. It reads forwards in chunks.
func scanBack(l *wal.Log, topic string, upTo uint64, fn func(off uint64, origin string, originOff uint64) bool) error {
	type rec struct {
		off, originOff uint64
		origin         string
	}
	var buf []rec
	chunk := uint64(vectorChunkFirst)
	for hi := upTo; ; {
		first, _, ok := l.Bounds(topic)
		if !ok || hi <= first {
			return nil
		}
		lo := first
		if hi-first > chunk {
			lo = hi - chunk
		}
		buf = buf[:0]
		for from := lo; from < hi; {
			n, err := l.ReadFunc(topic, from, int(hi-from), vectorReadBytes, func(r *wal.Record) error {
				buf = append(buf, rec{off: r.Offset, origin: r.OriginRegion, originOff: r.OriginOffset})
				from = r.Offset + 1
				return nil
			})
			oor, isOOR := errors.AsType[*wal.OffsetOutOfRangeError](err)
			switch {
			case isOOR && oor.First > from:
				from = oor.First // retention cut meanwhile: what is gone is gone
			case err != nil:
				return err
			case n == 0:
				return nil // nothing below hi (cannot happen below the high-watermark)
			}
		}
		for i := len(buf) - 1; i >= 0; i-- {
			if !fn(buf[i].off, buf[i].origin, buf[i].originOff) {
				return nil
			}
		}
		hi = lo
		chunk = min(2*chunk, vectorChunkMax)
	}
}

// vectorStart returns the offset of topic's log where a subscription resuming after vector v
// starts: the first record v does not cover (the head when it covers all). Every record below
// it is covered; records after it that v covers are skipped by the cursor.
func vectorStart(l *wal.Log, region, topic string, v map[string]uint64) (uint64, error) {
	_, head, ok := l.Bounds(topic)
	if !ok || head == 0 {
		return 0, nil
	}
	held, err := topicOrigins(l, region, topic, head)
	if err != nil {
		return 0, err
	}
	// An origin is settled once a record of it that v covers was seen: every earlier record
	// of that origin is covered too (its order is kept in the log). One whose every record
	// here v covers (the highest it may hold is at most v's) is settled at once. An origin v
	// does not name is settled only at the log's start: then the whole log is read.
	unsettled := make(map[string]bool, len(held)+len(v))
	allNamed := true
	for o, top := range held {
		last, ok := v[o]
		switch {
		case !ok:
			allNamed = false
		case top > last:
			unsettled[o] = true
		}
	}
	for o := range v {
		if _, ok := held[o]; !ok {
			unsettled[o] = true // not known to be held here: settled by a covered record, or at the start
		}
	}
	start := head
	if allNamed && len(unsettled) == 0 {
		return head, nil
	}
	err = scanBack(l, topic, head, func(off uint64, origin string, originOff uint64) bool {
		if origin == "" {
			origin = region
		}
		if last, ok := v[origin]; !ok || originOff > last {
			start = off
		} else {
			delete(unsettled, origin)
		}
		return !allNamed || len(unsettled) > 0
	})
	return start, err
}

// prefixScanMax bounds the records prefixVector reads. Past it the vector names only the
// origins found so far (each with its exact highest offset): the others count as not covered,
// so a resume after it delivers more, never less.
const prefixScanMax = 1 << 20

// prefixVector returns the vector of every record of topic below upTo: per origin, the
// highest origin offset among them (see prefixScanMax).
func prefixVector(l *wal.Log, region, topic string, upTo uint64) (map[string]uint64, error) {
	vec := make(map[string]uint64)
	if upTo == 0 {
		return vec, nil
	}
	held, err := topicOrigins(l, region, topic, upTo)
	if err != nil {
		return nil, err
	}
	read := 0
	err = scanBack(l, topic, upTo, func(_ uint64, origin string, originOff uint64) bool {
		if origin == "" {
			origin = region
		}
		if _, ok := vec[origin]; !ok {
			vec[origin] = originOff // the highest: seen first from above
		}
		if read++; read >= prefixScanMax {
			return false
		}
		for o := range held {
			if _, ok := vec[o]; !ok {
				return true
			}
		}
		return false
	})
	return vec, err
}

// advanceVector raises vec (in place) over the records of topic from from to upTo, upTo
// included, and returns the offset after the last record read.
func advanceVector(l *wal.Log, region, topic string, vec map[string]uint64, from, upTo uint64) (uint64, error) {
	for from <= upTo {
		n, err := l.ReadFunc(topic, from, int(min(upTo-from+1, vectorChunkMax)), vectorReadBytes, func(r *wal.Record) error {
			o := originOf(r, region)
			if last, ok := vec[o]; !ok || r.OriginOffset > last {
				vec[o] = r.OriginOffset
			}
			from = r.Offset + 1
			return nil
		})
		oor, isOOR := errors.AsType[*wal.OffsetOutOfRangeError](err)
		switch {
		case isOOR && oor.First > from:
			from = oor.First
		case err != nil:
			return from, err
		case n == 0:
			return from, nil
		}
	}
	return from, nil
}

// --- the subscription's side -------------------------------------------------------------

// vectorResume is where the cursor on topic starts when the request's vector names it, and
// whether it does. Run goroutine.
func (sub *subscription) vectorResume(topic string) (uint64, bool, *wire.Error) {
	v, ok := sub.vec.want[topic]
	n := sub.s.n
	if d := sub.req.Durable; d != "" {
		// A durable's positions only move forward: the request's vector is raised to cover
		// what the durable acknowledged as this node knows it, its own vector and those
		// mirrored here newer than it (a client that moved brings only what it delivered).
		dv, dok, err := mirroredVector(n.wal, n.cfg.Region, d, topic)
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
	start, err := vectorStart(n.wal, n.cfg.Region, topic, v)
	if err != nil {
		return 0, false, wire.Errorf(wire.CodeInternal, "find the vector position of topic %q: %v", sub.s.actor.ClientName(topic), err)
	}
	if sub.req.Durable != "" {
		sub.vec.begin(topic, start, maps.Clone(v))
	}
	return start, true, nil
}

// mirroredVector is the vector a durable resumes after on topic when positions of it mirrored
// from other regions (federation/positions.go) are newer than its own here (or it has none
// here): its own vector raised to cover what each of those covers. ok is false when there is
// none newer: the durable resumes from its own position as usual. It costs one pass over the
// topic's positions, and a backward read (prefixVector) for an own position without a vector.
func mirroredVector(l *wal.Log, region, durable, topic string) (map[string]uint64, bool, error) {
	var own *wal.PositionInfo
	var mirrored []string
	err := l.Positions(wal.PositionFilter{Topic: topic}, func(pi wal.PositionInfo) bool {
		if pi.Name == durable {
			own = &pi
		} else if _, d, ok := federation.ParseMirroredPosition(pi.Name); ok && d == durable {
			mirrored = append(mirrored, pi.Name)
		}
		return true
	})
	if err != nil {
		return nil, false, err
	}
	var newer []map[string]uint64
	for _, name := range mirrored {
		at, ok, err := l.Position(name, topic) // its value is when its origin stored it
		if err != nil {
			return nil, false, err
		}
		if !ok || own != nil && int64(at) <= own.Updated.UnixNano() {
			continue
		}
		if _, vec, ok, err := l.PositionVector(name, topic); err != nil {
			return nil, false, err
		} else if ok && vec != nil {
			newer = append(newer, vec)
		}
	}
	if len(newer) == 0 {
		return nil, false, nil
	}
	v := map[string]uint64{}
	if own != nil {
		_, vec, _, err := l.PositionVector(durable, topic)
		if err == nil && vec == nil {
			vec, err = prefixVector(l, region, topic, own.Resume)
		}
		if err != nil {
			return nil, false, err
		}
		v = vec
	}
	for _, m := range newer {
		for o, off := range m {
			if last, ok := v[o]; !ok || off > last {
				v[o] = off
			}
		}
	}
	return v, true, nil
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
		vec, err := prefixVector(n.wal, n.cfg.Region, topic, min(av.at, off+1))
		if err != nil {
			n.log.Warn("durable position stored without its vector", "durable", sub.req.Durable, "topic", topic, "err", err)
			return nil
		}
		av.vec, av.at = vec, min(av.at, off+1)
	}
	at, err := advanceVector(n.wal, n.cfg.Region, topic, av.vec, av.at, off)
	if err != nil {
		n.log.Warn("durable position stored without its vector", "durable", sub.req.Durable, "topic", topic, "err", err)
		return nil
	}
	av.at = at
	return maps.Clone(av.vec)
}
