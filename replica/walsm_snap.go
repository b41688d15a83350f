package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/quicmq/quicmq/wal"
)

// WalSM snapshots carry, read generically: every key of the group's own key space ('L' |
// group, whatever its kinds: applied index, topic states, the de-duplication window, and
// any state added later), and for each topic of the group every metadata key wal keeps of
// it other than its records (wal.ReplicaWriter.TopicMeta: named positions, mirror cursors,
// consumer group states, in their own layouts). Records are fetched (ImportChunk).
//
// Payload (in the frame of snapshot.go, kind snapKindWal):
//
//	uvarint n | n x (bytes key after 'L' | group, bytes value)
//	uvarint t | t x (str topic | uvarint m | m x (bytes wal key, bytes wal value))

type walSnap struct {
	applied uint64
	kvs     [][2][]byte // key suffix after 'L' | group, value
	topics  []walSnapTopic
}

type walSnapTopic struct {
	name     string
	next     uint64
	lastTime int64
	first    uint64 // the log start: the installing replica keeps nothing below it
	meta     []wal.MetaKV
}

func groupRange(group uint64) (lo, hi []byte) {
	lo = binary.BigEndian.AppendUint64([]byte{prefixLog}, group)
	if group == ^uint64(0) {
		return lo, []byte{prefixLog + 1}
	}
	return lo, binary.BigEndian.AppendUint64([]byte{prefixLog}, group+1)
}

// SnapshotData implements Snapshotter.
func (s *WalSM) SnapshotData(group uint64) (uint64, []byte, error) {
	g := s.groups[group]
	if g == nil {
		return 0, nil, fmt.Errorf("replica: group %d: snapshot before Applied opened it", group)
	}
	lo, hi := groupRange(group)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return 0, nil, fmt.Errorf("replica: group %d: snapshot: %w", group, err)
	}
	var (
		p []byte
		n uint64
	)
	var kvs []byte
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return 0, nil, errors.Join(err, it.Close())
		}
		kvs = appendBytes(kvs, it.Key()[len(lo):])
		kvs = appendBytes(kvs, v)
		n++
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return 0, nil, fmt.Errorf("replica: group %d: snapshot: %w", group, err)
	}
	p = append(binary.AppendUvarint(p, n), kvs...)
	names := make([]string, 0, len(g.topics))
	for name := range g.topics {
		names = append(names, name)
	}
	slices.Sort(names)
	p = binary.AppendUvarint(p, uint64(len(names)))
	for _, name := range names {
		meta, err := s.w.TopicMeta(name)
		if err != nil {
			return 0, nil, fmt.Errorf("replica: group %d: snapshot: %w", group, err)
		}
		p = appendStr(p, name)
		p = binary.AppendUvarint(p, uint64(len(meta)))
		for _, kv := range meta {
			p = appendBytes(appendBytes(p, kv.Key), kv.Value)
		}
	}
	return g.applied, frameSnap(snapVersion, snapKindWal, p), nil
}

// decodeWalSnap decodes and checks a WalSM's snapshot data of group: every value of the
// group's key space passes its CRC, the applied state is there, and the topics listed are
// those whose state it holds.
func decodeWalSnap(group uint64, data []byte) (*walSnap, error) {
	p, err := openSnap(data, snapVersion, snapKindWal, "snapshot data")
	if err != nil {
		return nil, err
	}
	d := entryDecoder{b: p}
	bad := func(format string, args ...any) (*walSnap, error) {
		return nil, fmt.Errorf("%w: group %d: %s", errSnapshot, group, fmt.Sprintf(format, args...))
	}
	lo, _ := groupRange(group)
	ws := &walSnap{}
	states := map[string]walTopic{}
	hasApplied := false
	n := d.uvarint()
	for i := uint64(0); i < n && d.bad == ""; i++ {
		k, v := d.bytes(), d.bytes()
		if d.bad != "" {
			break
		}
		if len(k) == 0 {
			return bad("empty key in the group's state")
		}
		full := append(slices.Clip(lo), k...)
		pl, err := unseal(full, v)
		if err != nil {
			return bad("state key %x: %v", k, err)
		}
		switch {
		case k[0] == kindWalApplied && len(k) == 1:
			if len(pl) != 16 {
				return bad("applied state of %d bytes", len(pl))
			}
			ws.applied, hasApplied = binary.BigEndian.Uint64(pl[0:8]), true
		case k[0] == kindWalTopic:
			st, ok := decodeTopicState(pl)
			if !ok {
				return bad("topic state of %d bytes", len(pl))
			}
			states[string(k[1:])] = st
		}
		ws.kvs = append(ws.kvs, [2][]byte{k, v})
	}
	t := d.uvarint()
	for i := uint64(0); i < t && d.bad == ""; i++ {
		name := d.str()
		m := d.uvarint()
		if m > uint64(len(d.b)) {
			d.fail("metadata count past the end")
		}
		st := walSnapTopic{name: name}
		for j := uint64(0); j < m && d.bad == ""; j++ {
			st.meta = append(st.meta, wal.MetaKV{Key: d.bytes(), Value: d.bytes()})
		}
		if d.bad != "" {
			break
		}
		if i > 0 && ws.topics[i-1].name >= name {
			return bad("topics not in order at %q", name)
		}
		// A topic without a state has had no record applied (a position only).
		ts, ok := states[name]
		if ok {
			delete(states, name)
		}
		st.next, st.lastTime, st.first = ts.next, ts.lastTime, ts.first
		ws.topics = append(ws.topics, st)
	}
	if d.bad == "" && len(d.b) > 0 {
		d.fail("trailing bytes")
	}
	if d.bad != "" {
		return bad("%s", d.bad)
	}
	if !hasApplied {
		return bad("no applied state")
	}
	for name := range states {
		return bad("topic %q has a state but is not listed", name)
	}
	return ws, nil
}

// Missing implements Snapshotter: per topic, the records from this replica's next offset
// (fetched ones included) to the snapshot's.
func (s *WalSM) Missing(group uint64, data []byte) ([]Span, error) {
	ws, err := decodeWalSnap(group, data)
	if err != nil {
		return nil, err
	}
	var out []Span
	for _, t := range ws.topics {
		if other, ok := s.elsewhere(t.name, group); ok {
			return nil, fmt.Errorf("%w: group %d: topic %q belongs to group %d", errSnapshot, group, t.name, other)
		}
		// Nothing below the snapshot's log start is fetched: it is cut on the group.
		next, _, _ := s.w.Next(t.name)
		from := next
		delete(s.jumps, t.name)
		if t.first > next {
			from = t.first
			s.jumps[t.name] = t.first
		}
		if from < t.next {
			out = append(out, Span{Log: t.name, From: from, To: t.next})
		}
	}
	return out, nil
}

// fetchedRecordMax bounds the records of one chunk.
const fetchedRecordMax = 1024

// ReadChunk implements Snapshotter: the records as wal serves them (never past the
// high-watermark: applied and committed here).
func (s *WalSM) ReadChunk(group uint64, topic string, from, to uint64, maxBytes int) ([]byte, uint64, error) {
	if g, ok := s.elsewhere(topic, group); ok {
		return nil, 0, fmt.Errorf("replica: topic %q belongs to group %d, not %d", topic, g, group)
	}
	if to <= from {
		return nil, 0, fmt.Errorf("replica: group %d: topic %q: empty range [%d, %d)", group, topic, from, to)
	}
	recs, err := s.log.Read(topic, from, int(min(to-from, fetchedRecordMax)), maxBytes)
	var oor *wal.OffsetOutOfRangeError
	if errors.As(err, &oor) && from < oor.First {
		// Cut here since the snapshot was sent: the fetch fails, and the leader's next
		// snapshot (with the newer log start) starts another catch-up.
		return nil, 0, fmt.Errorf("replica: group %d: topic %q: records below %d were cut here since the snapshot that asks for %d: catch up to a newer snapshot", group, topic, oor.First, from)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("replica: group %d: read %q: %w", group, topic, err)
	}
	if len(recs) == 0 {
		return nil, 0, fmt.Errorf("replica: group %d: topic %q: records [%d, %d) not applied here", group, topic, from, to)
	}
	p := binary.AppendUvarint(nil, uint64(len(recs)))
	for i := range recs {
		p = appendFetched(p, &recs[i])
	}
	return frameSnap(chunkVersion, snapKindWal, p), recs[len(recs)-1].Offset + 1, nil
}

func appendFetched(p []byte, r *wal.Record) []byte {
	p = binary.AppendUvarint(p, r.Offset)
	p = binary.AppendUvarint(p, uint64(r.Time))
	p = appendStr(p, r.OriginRegion)
	p = binary.AppendUvarint(p, r.OriginOffset)
	p = appendStr(p, r.ProducerID)
	p = binary.AppendUvarint(p, r.Sequence)
	p = binary.AppendUvarint(p, uint64(len(r.Headers)))
	for _, h := range r.Headers {
		p = appendStr(p, h.Key)
		p = appendBytes(p, h.Value)
	}
	return appendBytes(p, r.Payload)
}

// decodeWalChunk decodes a chunk of fetched records: dense offsets, times that never
// decrease.
func decodeWalChunk(chunk []byte) ([]wal.Record, error) {
	p, err := openSnap(chunk, chunkVersion, snapKindWal, "chunk")
	if err != nil {
		return nil, err
	}
	d := entryDecoder{b: p}
	n := d.uvarint()
	if n > uint64(len(p)) {
		d.fail("record count past the end")
	}
	var recs []wal.Record
	for i := uint64(0); i < n && d.bad == ""; i++ {
		r := wal.Record{Offset: d.uvarint(), Time: int64(d.uvarint()), OriginRegion: d.str(), OriginOffset: d.uvarint(),
			ProducerID: d.str(), Sequence: d.uvarint()}
		h := d.uvarint()
		if h > uint64(len(d.b)) {
			d.fail("header count past the end")
		}
		for j := uint64(0); j < h && d.bad == ""; j++ {
			r.Headers = append(r.Headers, wal.Header{Key: d.longStr(), Value: d.bytes()})
		}
		r.Payload = d.bytes()
		if d.bad == "" && i > 0 && (r.Offset != recs[i-1].Offset+1 || r.Time < recs[i-1].Time) {
			d.fail("offsets not dense or times decreasing")
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

// ImportChunk implements Snapshotter.
func (s *WalSM) ImportChunk(b *pebble.Batch, group uint64, topic string, to uint64, chunk []byte) (int, error) {
	if g, ok := s.elsewhere(topic, group); ok {
		return 0, fmt.Errorf("replica: fetched records of %q for group %d: the topic belongs to group %d", topic, group, g)
	}
	recs, err := decodeWalChunk(chunk)
	if err != nil {
		return 0, err
	}
	if len(recs) > 0 && recs[len(recs)-1].Offset >= to {
		return 0, fmt.Errorf("replica: group %d: fetched record of %q at offset %d, past the snapshot's %d", group, topic, recs[len(recs)-1].Offset, to)
	}
	if err := s.w.Bind(b, topic, group); err != nil {
		return 0, err
	}
	if err := s.w.AppendFetched(b, topic, recs, s.jumps[topic]); err != nil {
		return 0, err
	}
	return len(recs), nil
}

// Restore implements Snapshotter: the group's key space is replaced by the snapshot's,
// each topic's metadata by its, and records past a topic's next offset (fetched beyond
// it, or left by an unfinished catch-up) are discarded; the in-memory state is loaded
// again once b is committed.
func (s *WalSM) Restore(b *pebble.Batch, group, index uint64, data []byte) (func() error, error) {
	ws, err := decodeWalSnap(group, data)
	if err != nil {
		return nil, err
	}
	if ws.applied != index {
		return nil, fmt.Errorf("replica: group %d: snapshot at index %d holds the state applied at %d", group, index, ws.applied)
	}
	lo, hi := groupRange(group)
	if err := b.DeleteRange(lo, hi, nil); err != nil {
		return nil, err
	}
	for _, kv := range ws.kvs {
		if err := b.Set(append(slices.Clip(lo), kv[0]...), kv[1], nil); err != nil {
			return nil, err
		}
	}
	for _, t := range ws.topics {
		if other, ok := s.elsewhere(t.name, group); ok {
			return nil, fmt.Errorf("%w: group %d: topic %q belongs to group %d", errSnapshot, group, t.name, other)
		}
		if err := s.w.Bind(b, t.name, group); err != nil {
			return nil, err
		}
		next, _, _ := s.w.Next(t.name)
		if next < t.next && t.first < t.next {
			return nil, fmt.Errorf("replica: group %d: snapshot needs %q up to offset %d, this replica has %d", group, t.name, t.next, next)
		}
		if err := s.w.Truncate(b, t.name, t.next, t.lastTime); err != nil {
			return nil, err
		}
		// The snapshot's log start: what this replica holds below it was cut on the
		// group (a log that ends before it starts empty there).
		if !brokenRestoreIgnoresFirst {
			if _, err := s.w.Cut(b, t.name, t.first, true); err != nil {
				return nil, fmt.Errorf("replica: group %d: %w", group, err)
			}
		}
		delete(s.jumps, t.name)
		if err := s.w.RestoreTopicMeta(b, t.name, t.meta); err != nil {
			return nil, fmt.Errorf("replica: group %d: %w", group, err)
		}
		s.w.Installed(t.name)
	}
	return func() error {
		delete(s.groups, group)
		_, err := s.Applied(group)
		return err
	}, nil
}

// settle discards the topic's records past its applied state (those of a catch-up that
// did not finish) before an apply writes after it.
func (s *WalSM) settle(b *pebble.Batch, topic string, st *walTopic) error {
	if next, _, ok := s.w.Next(topic); ok && next > st.next {
		return s.w.Truncate(b, topic, st.next, st.lastTime)
	}
	return nil
}
