package vector

import (
	"errors"
	"strings"

	"github.com/quicmq/quicmq/federation"
	"github.com/quicmq/quicmq/wal"
)

// A backward read takes at most ChunkMax records at a time; reads start small (chunkFirst: a
// consumer near the head) and double up to it. ReadBytes bounds the bytes of one read.
const (
	chunkFirst = 256
	ChunkMax   = 4096
	ReadBytes  = 8 << 20
)

// Covered reports whether vector v covers the record of origin (this region's when "") at
// originOff.
func Covered(v map[string]uint64, origin, region string, originOff uint64) bool {
	if origin == "" {
		origin = region
	}
	last, ok := v[origin]
	return ok && originOff <= last
}

// OriginOf is the origin region of a record of this region's log.
func OriginOf(rec *wal.Record, region string) string {
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
	err := l.Positions(wal.PositionFilter{NamePrefix: federation.CursorPrefix, Topic: topic}, func(pi wal.PositionInfo) bool {
		if _, _, mirrored := federation.ParseMirroredPosition(pi.Name); pi.HasAcked && !mirrored {
			origins[strings.TrimPrefix(pi.Name, federation.CursorPrefix)] = pi.Acked
		}
		return true
	})
	return origins, err
}

// ScanBack calls fn for the records of topic below upTo, from the highest down, until fn
// returns false or the first retained record was passed. It reads forwards in chunks.
func ScanBack(l *wal.Log, topic string, upTo uint64, fn func(off uint64, origin string, originOff uint64) bool) error {
	type rec struct {
		off, originOff uint64
		origin         string
	}
	var buf []rec
	chunk := uint64(chunkFirst)
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
			n, err := l.ReadFunc(topic, from, int(hi-from), ReadBytes, func(r *wal.Record) error {
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
		chunk = min(2*chunk, ChunkMax)
	}
}

// Start returns the offset of topic's log where a subscription resuming after vector v
// starts: the first record v does not cover (the head when it covers all). Every record below
// it is covered; records after it that v covers are skipped by the cursor.
func Start(l *wal.Log, region, topic string, v map[string]uint64) (uint64, error) {
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
	err = ScanBack(l, topic, head, func(off uint64, origin string, originOff uint64) bool {
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

// prefixScanMax bounds the records Prefix reads. Past it the vector names only the
// origins found so far (each with its exact highest offset): the others count as not covered,
// so a resume after it delivers more, never less.
const prefixScanMax = 1 << 20

// Prefix returns the vector of every record of topic below upTo: per origin, the
// highest origin offset among them (see prefixScanMax).
func Prefix(l *wal.Log, region, topic string, upTo uint64) (map[string]uint64, error) {
	vec := make(map[string]uint64)
	if upTo == 0 {
		return vec, nil
	}
	held, err := topicOrigins(l, region, topic, upTo)
	if err != nil {
		return nil, err
	}
	read := 0
	err = ScanBack(l, topic, upTo, func(_ uint64, origin string, originOff uint64) bool {
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

// Advance raises vec (in place) over the records of topic from from to upTo, upTo
// included, and returns the offset after the last record read.
func Advance(l *wal.Log, region, topic string, vec map[string]uint64, from, upTo uint64) (uint64, error) {
	next, _, err := Forward(l, topic, from, upTo+1, func(r *wal.Record) {
		o := OriginOf(r, region)
		if last, ok := vec[o]; !ok || r.OriginOffset > last {
			vec[o] = r.OriginOffset
		}
	})
	return next, err
}

// Forward calls fn for the records of topic in [from, to), reading ChunkMax at a time and
// stepping over what retention cut meanwhile, and returns the offset after the last record
// read. short is true when a read found nothing before to (it cannot happen below the
// high-watermark). fn must not keep the record.
func Forward(l *wal.Log, topic string, from, to uint64, fn func(r *wal.Record)) (next uint64, short bool, err error) {
	return ForwardWith(func(from uint64, max int, fn func(*wal.Record) error) (int, error) {
		return l.ReadFunc(topic, from, max, ReadBytes, fn)
	}, from, to, fn)
}

// ForwardWith is Forward reading with read (a topic's Log.ReadFunc, or a wal.Sweep's read of
// it, at most ReadBytes a read): a reader of many topics reads them with one iterator.
func ForwardWith(read func(from uint64, max int, fn func(*wal.Record) error) (int, error), from, to uint64, fn func(r *wal.Record)) (next uint64, short bool, err error) {
	for from < to {
		n, err := read(from, int(min(to-from, ChunkMax)), func(r *wal.Record) error {
			fn(r)
			from = r.Offset + 1
			return nil
		})
		oor, isOOR := errors.AsType[*wal.OffsetOutOfRangeError](err)
		switch {
		case isOOR && oor.First > from:
			from = oor.First
		case err != nil:
			return from, false, err
		case n == 0:
			return from, true, nil
		}
	}
	return from, false, nil
}

// Mirrored is the vector a durable resumes after on topic when positions of it mirrored
// from other regions (federation/positions.go) are newer than its own here (or it has none
// here): its own vector raised to cover what each of those covers. ok is false when there is
// none newer: the durable resumes from its own position as usual. It costs one pass over the
// topic's positions, and a backward read (Prefix) for an own position without a vector.
func Mirrored(l *wal.Log, region, durable, topic string) (map[string]uint64, bool, error) {
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
			vec, err = Prefix(l, region, topic, own.Resume)
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
