package wal

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// A named position is a uint64 per (name, topic): a durable consumer's last
// acknowledged offset, or a mirror cursor's last origin offset. The log does
// not interpret the names; node and federation own their grammar
// ("tenant/T/NAME", "mirror/REGION").
//
// Position value layouts (in the metadata frame of record.go):
//
//	v1: value u64 LE                                   (stores before the update time)
//	v2: value u64 LE | updated i64 LE unix ns | flags u8
//	v3: v2 | count uvarint | count x (uvarint len, origin region, uvarint origin offset)
//
// v3 (written only for a position with a vector, regions sorted) adds the
// portable position: per origin region, the last origin offset the consumer
// acknowledged in the topic (the node computes it, node/subscriptions/vector.go). v1 and v2
// values read as positions without a vector.
//
// flagNext (v2 only) marks a position set by a reset: nothing at or after
// value is acknowledged, so the consumer resumes at value itself rather than
// at value+1. Without it a consumer resumes at value+1.
const (
	positionV2  = 2
	positionV3  = 3
	posV2Len    = 8 + 8 + 1
	maxVector   = 256 // origins of one stored vector (wire.MaxVectorOrigins)
	flagNext    = 1 << 0
	knownPosFlg = flagNext
)

// posValue is a durable position in memory.
type posValue struct {
	v       uint64
	updated int64 // unix nanoseconds of the last write; 0 for a v1 value
	next    bool  // flagNext: resume at v, not v+1
	// vec is the portable position (v3): origin region -> last acknowledged origin
	// offset; nil for none. Never modified once stored: readers get a copy.
	vec map[string]uint64
}

// resume is the offset the consumer of p resumes at.
func (p posValue) resume() uint64 {
	if p.next {
		return p.v
	}
	return p.v + 1
}

// posWrite is a position written (or deleted) by a batch, published by the
// completer once the batch is durable.
type posWrite struct {
	key posName
	val posValue
	del bool
}

// putPosition writes a position (v2, or v3 with a vector) into b.
func putPosition(b *pebble.Batch, topic, name string, v posValue) posWrite {
	k := positionKey(topic, name)
	p := binary.LittleEndian.AppendUint64(make([]byte, 0, posV2Len), v.v)
	p = binary.LittleEndian.AppendUint64(p, uint64(v.updated))
	var flags byte
	if v.next {
		flags |= flagNext
	}
	p = append(p, flags)
	version := byte(positionV2)
	if len(v.vec) > 0 {
		version = positionV3
		p = binary.AppendUvarint(p, uint64(len(v.vec)))
		for _, r := range slices.Sorted(maps.Keys(v.vec)) {
			p = binary.AppendUvarint(p, uint64(len(r)))
			p = append(p, r...)
			p = binary.AppendUvarint(p, v.vec[r])
		}
	}
	_ = b.Set(k, sealMetaVersion(k, version, p), nil)
	return posWrite{key: posName{name: name, topic: topic}, val: v}
}

// checkVector refuses a vector the v3 layout cannot hold.
func checkVector(vec map[string]uint64) error {
	if len(vec) > maxVector {
		return fmt.Errorf("%w: position vector of %d regions, at most %d", ErrInvalidRequest, len(vec), maxVector)
	}
	for r := range vec {
		if err := checkName("position vector region", r); err != nil {
			return err
		}
	}
	return nil
}

// decodeVector reads the vector of a v3 position value (after its v2 part).
func decodeVector(p []byte) (map[string]uint64, string) {
	n, w := binary.Uvarint(p)
	if w <= 0 || n == 0 || n > maxVector {
		return nil, "bad position vector count"
	}
	p = p[w:]
	vec := make(map[string]uint64, n)
	for range n {
		l, w := binary.Uvarint(p)
		if w <= 0 || l == 0 || l > uint64(len(p)-w) {
			return nil, "bad position vector region"
		}
		r := string(p[w : w+int(l)])
		p = p[w+int(l):]
		off, w := binary.Uvarint(p)
		if w <= 0 {
			return nil, "bad position vector offset"
		}
		p = p[w:]
		if _, dup := vec[r]; dup {
			return nil, "position vector region twice"
		}
		vec[r] = off
	}
	if len(p) != 0 {
		return nil, "bad metadata length"
	}
	return vec, ""
}

// decodePosition reads a stored position of either version.
func decodePosition(key, val []byte) (posValue, string) {
	version, p, reason := openMetaAny(key, val)
	switch {
	case reason != "":
		return posValue{}, reason
	case version == metaVersion && len(p) == 8:
		return posValue{v: binary.LittleEndian.Uint64(p)}, ""
	case version == positionV2 && len(p) == posV2Len, version == positionV3 && len(p) > posV2Len:
		if p[16]&^knownPosFlg != 0 {
			return posValue{}, "unknown position flags"
		}
		pv := posValue{
			v:       binary.LittleEndian.Uint64(p),
			updated: int64(binary.LittleEndian.Uint64(p[8:])),
			next:    p[16]&flagNext != 0,
		}
		if version == positionV3 {
			vec, reason := decodeVector(p[posV2Len:])
			if reason != "" {
				return posValue{}, reason
			}
			pv.vec = vec
		}
		return pv, ""
	case version == metaVersion || version == positionV2 || version == positionV3:
		return posValue{}, "bad metadata length"
	}
	return posValue{}, "unknown metadata version"
}

// SetPosition stores a named position with a synced write, ordered after
// every append queued before it. It returns once the write is durable. A
// position of a topic deleted since Open (and not created again) is refused
// with a *TopicDeletedError.
func (l *Log) SetPosition(ctx context.Context, p Position) error {
	return l.Append(ctx, AppendRequest{Position: &p}).Err
}

// Position returns a stored position (the last acknowledged offset) and
// whether it exists. Only durable values are returned: positions are served
// from memory (loaded at Open, updated after each synced commit), never from
// what Pebble shows before its fsync. A position reset to offset 0 (nothing
// acknowledged) has no last acknowledged offset: Position reports it as
// absent, Resume reports 0.
func (l *Log) Position(name, topic string) (uint64, bool, error) {
	pv, ok, err := l.position(name, topic)
	if err != nil || !ok {
		return 0, false, err
	}
	if pv.next {
		if pv.v == 0 {
			return 0, false, nil
		}
		return pv.v - 1, true, nil
	}
	return pv.v, true, nil
}

// Resume returns the offset a consumer with a stored position resumes at (the
// last acknowledged offset + 1, or where a reset put it), and whether a
// position is stored.
func (l *Log) Resume(name, topic string) (uint64, bool, error) {
	pv, ok, err := l.position(name, topic)
	if err != nil || !ok {
		return 0, false, err
	}
	return pv.resume(), true, nil
}

// PositionVector returns the portable position stored with a position (a
// copy: origin region -> last acknowledged origin offset), the offset it
// resumes at, and whether a position is stored. vec is nil for a position
// stored without a vector (written before vectors, by a reset, or by a
// writer that gave none).
func (l *Log) PositionVector(name, topic string) (resume uint64, vec map[string]uint64, ok bool, err error) {
	pv, ok, err := l.position(name, topic)
	if err != nil || !ok {
		return 0, nil, false, err
	}
	return pv.resume(), maps.Clone(pv.vec), true, nil
}

func (l *Log) position(name, topic string) (posValue, bool, error) {
	l.db.RLock()
	closed := l.db.closed
	l.db.RUnlock()
	if closed {
		return posValue{}, false, fmt.Errorf("wal: position %q of %q: %w", name, topic, ErrClosed)
	}
	l.mu.RLock()
	v, ok := l.mu.positions.get(posName{name: name, topic: topic})
	l.mu.RUnlock()
	return v, ok, nil
}
