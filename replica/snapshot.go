package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/cockroachdb/pebble/v2"
)

// Snapshots carry a group's state other than its records (metadata only), and a replica
// that installs one first fetches the records it lacks from a peer's log (catchup.go).
// A StateMachine that implements Snapshotter supports both; the driver's groups then
// compact their logs with nothing lost for a replica behind.

// Snapshotter is the part of a StateMachine that builds, checks and installs metadata-only
// snapshots and moves records between replicas. SnapshotData, Missing, ImportChunk and
// Restore run on the driver's goroutine; ReadChunk on any (a peer's fetch).
type Snapshotter interface {
	// SnapshotData returns the group's applied index and its state there, without the
	// records, as committed to Pebble.
	SnapshotData(group uint64) (applied uint64, data []byte, err error)
	// Missing returns the records this replica's logs lack to install data (from
	// SnapshotData on a peer): per log, the offsets [From, To).
	Missing(group uint64, data []byte) ([]Span, error)
	// ReadChunk reads records [from, to) of the group's log, at most maxBytes of payload
	// after the first record, never past what is applied here; next is the offset after
	// the last record read. A log that has nothing of [from, to) yet is an error.
	ReadChunk(group uint64, log string, from, to uint64, maxBytes int) (chunk []byte, next uint64, err error)
	// ImportChunk writes into b the records of a chunk (from ReadChunk on a peer) to the
	// log, exactly as they were applied there; the first must be the log's next offset
	// here, and none may be at or past to. They are not served before Restore.
	ImportChunk(b *pebble.Batch, group uint64, log string, to uint64, chunk []byte) (records int, err error)
	// Restore installs data as the group's state at raft index index, in b; the records
	// it names must be stored (Missing is empty). after runs once b is committed.
	Restore(b *pebble.Batch, group, index uint64, data []byte) (after func() error, err error)
}

// Span is a range of offsets of one log (a topic) of a group.
type Span struct {
	Log      string
	From, To uint64
}

// Snapshot data and chunk framing: version u8 | kind u8 | crc32c u32 BE over the payload
// | payload. kind names the state machine that wrote it; a reader refuses another's.
const (
	snapVersion = 1
	snapKindLog = 1 // LogSM
	snapKindWal = 2 // WalSM

	chunkVersion = 1
	snapHeader   = 1 + 1 + 4
)

// errSnapshot is wrapped by every error decoding snapshot data or a chunk.
var errSnapshot = errors.New("replica: malformed snapshot")

func frameSnap(version, kind byte, payload []byte) []byte {
	out := make([]byte, snapHeader, snapHeader+len(payload))
	out[0], out[1] = version, kind
	binary.BigEndian.PutUint32(out[2:6], crc32.Checksum(payload, castagnoli))
	return append(out, payload...)
}

// openSnap checks the framing of snapshot data or a chunk and returns its payload.
func openSnap(p []byte, version, kind byte, what string) ([]byte, error) {
	switch {
	case len(p) < snapHeader:
		return nil, fmt.Errorf("%w: %s of %d bytes is shorter than its header", errSnapshot, what, len(p))
	case p[0] != version:
		return nil, fmt.Errorf("%w: %s version %d, want %d", errSnapshot, what, p[0], version)
	case p[1] != kind:
		return nil, fmt.Errorf("%w: %s of state machine kind %d, want %d", errSnapshot, what, p[1], kind)
	case crc32.Checksum(p[snapHeader:], castagnoli) != binary.BigEndian.Uint32(p[2:6]):
		return nil, fmt.Errorf("%w: %s checksum mismatch", errSnapshot, what)
	}
	return p[snapHeader:], nil
}

// LogSM snapshots: the group's applied state (applied index, next offset, last time).

// SnapshotData implements Snapshotter.
func (l *LogSM) SnapshotData(group uint64) (uint64, []byte, error) {
	l.mu.Lock()
	st, ok := l.mu.groups[group]
	l.mu.Unlock()
	if !ok {
		return 0, nil, fmt.Errorf("replica: group %d: snapshot before Applied opened it", group)
	}
	return st.applied, encodeLogSnap(st), nil
}

func encodeLogSnap(st logState) []byte {
	var p [24]byte
	binary.BigEndian.PutUint64(p[0:8], st.applied)
	binary.BigEndian.PutUint64(p[8:16], st.next)
	binary.BigEndian.PutUint64(p[16:24], uint64(st.lastTime))
	return frameSnap(snapVersion, snapKindLog, p[:])
}

// decodeLogSnap decodes a LogSM's snapshot data.
func decodeLogSnap(data []byte) (logState, error) {
	p, err := openSnap(data, snapVersion, snapKindLog, "snapshot data")
	if err != nil {
		return logState{}, err
	}
	if len(p) != 24 {
		return logState{}, fmt.Errorf("%w: log state of %d bytes, want 24", errSnapshot, len(p))
	}
	return logState{
		applied:  binary.BigEndian.Uint64(p[0:8]),
		next:     binary.BigEndian.Uint64(p[8:16]),
		lastTime: int64(binary.BigEndian.Uint64(p[16:24])),
	}, nil
}

// logLocalNext is the next offset of the group's records stored here, fetched ones
// included.
func (l *LogSM) logLocalNext(group uint64) uint64 {
	l.mu.Lock()
	next := l.mu.groups[group].next
	l.mu.Unlock()
	if st, ok := l.staged[group]; ok {
		next = st.next
	}
	return max(next, l.fetched[group])
}

// Missing implements Snapshotter. A LogSM has one log per group, named "".
func (l *LogSM) Missing(group uint64, data []byte) ([]Span, error) {
	st, err := decodeLogSnap(data)
	if err != nil {
		return nil, err
	}
	if have := l.logLocalNext(group); have < st.next {
		return []Span{{From: have, To: st.next}}, nil
	}
	return nil, nil
}

// ReadChunk implements Snapshotter: records as offset, raft index, time, data.
func (l *LogSM) ReadChunk(group uint64, log string, from, to uint64, maxBytes int) ([]byte, uint64, error) {
	if log != "" {
		return nil, 0, fmt.Errorf("replica: group %d: no log %q (a log group has one, named \"\")", group, log)
	}
	var (
		p    []byte
		n    int
		next = from
	)
	for next < to && (n == 0 || len(p) < maxBytes) {
		recs, err := l.Read(group, next, int(min(to-next, 256)))
		if err != nil {
			return nil, 0, err
		}
		if len(recs) == 0 {
			break
		}
		for _, r := range recs {
			if n > 0 && len(p) >= maxBytes {
				break
			}
			p = binary.AppendUvarint(p, r.Offset)
			p = binary.AppendUvarint(p, r.Index)
			p = binary.AppendUvarint(p, uint64(r.Time))
			p = appendBytes(p, r.Data)
			n++
			next = r.Offset + 1
		}
	}
	if n == 0 {
		return nil, 0, fmt.Errorf("replica: group %d: records [%d, %d) not applied here", group, from, to)
	}
	return frameSnap(chunkVersion, snapKindLog, append(binary.AppendUvarint(nil, uint64(n)), p...)), next, nil
}

// ImportChunk implements Snapshotter.
func (l *LogSM) ImportChunk(b *pebble.Batch, group uint64, log string, to uint64, chunk []byte) (int, error) {
	recs, err := decodeLogChunk(chunk)
	if err != nil {
		return 0, err
	}
	next := l.logLocalNext(group)
	for _, r := range recs {
		if r.Offset != next || r.Offset >= to {
			return 0, fmt.Errorf("replica: group %d: fetched record at offset %d, want %d (below %d)", group, r.Offset, next, to)
		}
		k := indexKey(prefixLog, kindRecord, group, r.Offset)
		p := make([]byte, 16, 16+len(r.Data))
		binary.BigEndian.PutUint64(p[0:8], r.Index)
		binary.BigEndian.PutUint64(p[8:16], uint64(r.Time))
		if err := b.Set(k, seal(k, append(p, r.Data...)), nil); err != nil {
			return 0, err
		}
		next++
	}
	l.fetched[group] = next
	return len(recs), nil
}

func decodeLogChunk(chunk []byte) ([]Record, error) {
	p, err := openSnap(chunk, chunkVersion, snapKindLog, "chunk")
	if err != nil {
		return nil, err
	}
	d := entryDecoder{b: p}
	n := d.uvarint()
	if n > uint64(len(p)) {
		d.fail("record count past the end")
	}
	var recs []Record
	for i := uint64(0); i < n && d.bad == ""; i++ {
		r := Record{Offset: d.uvarint(), Index: d.uvarint(), Time: int64(d.uvarint()), Data: d.bytes()}
		if d.bad == "" && i > 0 && r.Offset != recs[i-1].Offset+1 {
			d.fail("offsets not dense")
		}
		recs = append(recs, r)
	}
	if d.bad == "" && len(d.b) > 0 {
		d.fail("trailing bytes")
	}
	if d.bad != "" {
		return nil, fmt.Errorf("%w: chunk: %s", errSnapshot, d.bad)
	}
	return recs, nil
}

// Restore implements Snapshotter.
func (l *LogSM) Restore(b *pebble.Batch, group, index uint64, data []byte) (func() error, error) {
	st, err := decodeLogSnap(data)
	if err != nil {
		return nil, err
	}
	if st.applied != index {
		return nil, fmt.Errorf("replica: group %d: snapshot at index %d holds the state applied at %d", group, index, st.applied)
	}
	if have := l.logLocalNext(group); have < st.next && !l.brokenNoRecordCheck {
		return nil, fmt.Errorf("replica: group %d: snapshot needs records up to offset %d, this replica has %d", group, st.next, have)
	}
	if err := l.stage(b, group, st); err != nil {
		return nil, err
	}
	delete(l.fetched, group)
	return func() error { return nil }, nil
}
