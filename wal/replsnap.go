package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Snapshots and catch-up of replicated topics (package replica): a raft snapshot of a
// replicated topic carries its metadata only, and a replica that installs one fetches the
// records it lacks from a peer's log first. The writer gives replica both halves without
// replica knowing this package's layout: TopicMeta and RestoreTopicMeta move every key
// that describes the topic other than its records (named positions and consumer group
// states, whatever their value layout), and AppendFetched and Truncate place fetched
// records exactly as they were applied on the peer (same offsets, times, origin and
// producer fields).

// MetaKV is one stored key and value of a topic's metadata, as TopicMeta reads it: the
// key names the topic (never its node-local ID) and the value keeps its own framing and
// CRC, so it can be written as it is on another node.
type MetaKV struct {
	Key, Value []byte
}

// metaFamilies are the topic metadata kept by name: a family's keys of topic start with
// its prefix; group states (consumer groups) also end with the topic name.
func metaFamilies(topic string) (positions []byte) { return positionTopicPrefix(topic) }

// isGroupStateOf reports whether k is a consumer group's state key of topic ('s' |
// uvarint len(group) | group | topic); settings keys (no topic) are not.
func isGroupStateOf(k []byte, topic string) bool {
	if len(k) < 2 || k[0] != prefixGroup {
		return false
	}
	n, w := binary.Uvarint(k[1:])
	if w <= 0 || uint64(len(k)-1-w) < n {
		return false
	}
	rest := k[1+w+int(n):]
	return len(rest) > 0 && string(rest) == topic
}

// TopicMeta returns every stored metadata key of a bound topic other than its records:
// its named positions and its consumer groups' states, as committed to Pebble.
// Any goroutine may call it; replica calls it on the driver's goroutine, where what is
// committed is what the group has applied.
func (w *ReplicaWriter) TopicMeta(topic string) ([]MetaKV, error) {
	db := w.l.pdb
	var out []MetaKV
	collect := func(lo, hi []byte, keep func(k []byte) bool) error {
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return err
		}
		for ok := it.First(); ok; ok = it.Next() {
			if keep != nil && !keep(it.Key()) {
				continue
			}
			v, err := it.ValueAndErr()
			if err != nil {
				return errors.Join(err, it.Close())
			}
			out = append(out, MetaKV{Key: bytes.Clone(it.Key()), Value: bytes.Clone(v)})
		}
		return errors.Join(it.Error(), it.Close())
	}
	p := metaFamilies(topic)
	if err := collect(p, prefixEnd(p), nil); err != nil {
		return nil, fmt.Errorf("wal: metadata of %q: %w", topic, err)
	}
	if err := collect([]byte{prefixGroup}, []byte{prefixGroup + 1}, func(k []byte) bool { return isGroupStateOf(k, topic) }); err != nil {
		return nil, fmt.Errorf("wal: metadata of %q: %w", topic, err)
	}
	return out, nil
}

// RestoreTopicMeta replaces, in b, the bound topic's metadata by kvs (from TopicMeta on
// another replica): each key must be one of the topic's, and each value must pass its
// CRC. Positions become visible to readers at the next Published.
func (w *ReplicaWriter) RestoreTopicMeta(b *pebble.Batch, topic string, kvs []MetaKV) error {
	if w.bound(topic) == nil {
		return fmt.Errorf("wal: restore metadata of %q: %w: topic not bound", topic, ErrInvalidRequest)
	}
	prefix := metaFamilies(topic)
	keep := make(map[string]bool, len(kvs))
	var puts []posWrite
	for _, kv := range kvs {
		switch {
		case bytes.HasPrefix(kv.Key, prefix):
			name := string(kv.Key[len(prefix):])
			pv, reason := decodePosition(kv.Key, kv.Value)
			if reason == "" {
				reason = checkNameReason(name)
			}
			if reason != "" {
				return &CorruptError{Topic: topic, Reason: "restored position " + fmt.Sprintf("%q", name) + ": " + reason}
			}
			puts = append(puts, posWrite{key: posName{name: name, topic: topic}, val: pv})
		case isGroupStateOf(kv.Key, topic):
			if _, _, reason := openMetaAny(kv.Key, kv.Value); reason != "" {
				return &CorruptError{Topic: topic, Reason: "restored consumer group state: " + reason}
			}
		default:
			return fmt.Errorf("wal: restore metadata of %q: %w: key %x is not the topic's", topic, ErrInvalidRequest, kv.Key)
		}
		keep[string(kv.Key)] = true
	}
	old, err := w.TopicMeta(topic)
	if err != nil {
		return err
	}
	for _, kv := range old {
		if keep[string(kv.Key)] {
			continue
		}
		if err := b.Delete(kv.Key, nil); err != nil {
			return fmt.Errorf("wal: restore metadata of %q: %w", topic, err)
		}
		if bytes.HasPrefix(kv.Key, prefix) {
			pn := posName{name: string(kv.Key[len(prefix):]), topic: topic}
			w.positions = append(w.positions, posWrite{key: pn, del: true})
			delete(w.staged, pn)
		}
	}
	for _, kv := range kvs {
		if err := b.Set(kv.Key, kv.Value, nil); err != nil {
			return fmt.Errorf("wal: restore metadata of %q: %w", topic, err)
		}
	}
	for _, p := range puts {
		w.positions = append(w.positions, p)
		w.staged[p.key] = p.val.v
	}
	return nil
}

func checkNameReason(name string) string {
	if err := checkName("position name", name); err != nil {
		return err.Error()
	}
	return ""
}

// AppendFetched writes, in b, records fetched from another replica of the bound topic:
// recs[0].Offset must be the topic's next offset and the offsets dense, and times must
// not decrease. Each record keeps its own time, origin and producer fields (OriginOffset
// of a record without OriginRegion is its offset, as in Append). Unlike Append it does
// not make them visible: Published shows them only once the catch-up's snapshot is
// installed (Installed), so nothing a replica has not applied is served.
//
// jumpFrom, when past the topic's next offset, is the log start of the snapshot being
// caught up to: records fetched from there on are written after a gap, which the
// snapshot's installation closes by cutting the log at jumpFrom.
func (w *ReplicaWriter) AppendFetched(b *pebble.Batch, topic string, recs []Record, jumpFrom uint64) error {
	t := w.bound(topic)
	if t == nil {
		return fmt.Errorf("wal: fetched append %q: %w: topic not bound", topic, ErrInvalidRequest)
	}
	if len(recs) > 0 && recs[0].Offset > t.next && jumpFrom > t.next && recs[0].Offset == jumpFrom {
		// The snapshot's log starts past this replica's end: the records between are cut
		// on the group, and the installation deletes everything below jumpFrom (Cut).
		t.next = jumpFrom
		delete(w.spos, t)
	}
	for i := range recs {
		rec := &recs[i]
		if rec.Offset != t.next {
			return fmt.Errorf("wal: fetched append %q: %w: record at offset %d where %d is next", topic, ErrInvalidRequest, rec.Offset, t.next)
		}
		if rec.Time < t.lastTime {
			return fmt.Errorf("wal: fetched append %q: %w: time %d at offset %d before the last record's %d", topic, ErrInvalidRequest, rec.Time, rec.Offset, t.lastTime)
		}
		n := encodedLen(rec)
		op := b.SetDeferred(recordKeyLen, n)
		putRecordKey(op.Key, t.id, t.next)
		encodeRecord(op.Value, op.Key, rec, rec.Time, t.nextPos)
		if err := op.Finish(); err != nil {
			return fmt.Errorf("wal: fetched append %q: %w", topic, err)
		}
		w.stagePos(t, t.next, t.nextPos)
		t.next++
		t.nextPos += uint64(recordKeyLen + n)
		t.lastTime = rec.Time
	}
	return nil
}

// Installed makes the bound topic's records up to its next offset visible at the next
// Published: replica calls it when a snapshot whose records were fetched is installed.
func (w *ReplicaWriter) Installed(topic string) {
	if t := w.bound(topic); t != nil && !t.touched {
		t.touched = true
		w.touched = append(w.touched, t)
	}
}

// Truncate discards, in b, the bound topic's records from offset next on and makes
// lastTime the time of the record before next: replica's applied state is the authority,
// and records past it are those of a catch-up that did not finish (they are committed
// records of the group, fetched again or applied again identically). A high-watermark
// past next is lowered to it.
func (w *ReplicaWriter) Truncate(b *pebble.Batch, topic string, next uint64, lastTime int64) error {
	t := w.bound(topic)
	if t == nil {
		return fmt.Errorf("wal: truncate %q: %w: topic not bound", topic, ErrInvalidRequest)
	}
	if next >= t.next {
		return nil
	}
	k := make([]byte, recordKeyLen)
	putRecordKey(k, t.id, next)
	pos, err := w.posAt(t, next)
	if err != nil {
		return err
	}
	delete(w.spos, t)
	hi := make([]byte, recordKeyLen)
	putRecordKey(hi, t.id, t.next)
	if err := b.DeleteRange(k, hi, nil); err != nil {
		return fmt.Errorf("wal: truncate %q at %d: %w", topic, next, err)
	}
	t.next, t.nextPos, t.lastTime = next, pos, lastTime
	w.l.mu.Lock()
	if t.hwm > next {
		t.hwm, t.hwmPos = next, pos
	}
	w.l.mu.Unlock()
	return nil
}

// posAt is the byte position of t's offset off: its record's, or, when it is missing (a
// catch-up that jumped past a gap, or the topic's end), the end of the record before it,
// or the first offset's position when there is none.
func (w *ReplicaWriter) posAt(t *topic, off uint64) (uint64, error) {
	if pos, ok := w.stagedPos(t, off); ok {
		return pos, nil
	}
	k := recordKey(t.id, off)
	v, closer, err := w.l.pdb.Get(k)
	if err == nil {
		_, pos, reason := checkRecord(k, v)
		_ = closer.Close()
		if reason != "" {
			return 0, &CorruptError{Topic: t.name, Offset: off, Reason: reason}
		}
		return pos, nil
	}
	if !errors.Is(err, pebble.ErrNotFound) {
		return 0, fmt.Errorf("wal: truncate %q at %d: %w", t.name, off, err)
	}
	it, err := w.l.pdb.NewIter(&pebble.IterOptions{LowerBound: recordKey(t.id, 0), UpperBound: k})
	if err != nil {
		return 0, fmt.Errorf("wal: truncate %q at %d: %w", t.name, off, err)
	}
	defer it.Close()
	if !it.Last() {
		if err := it.Error(); err != nil {
			return 0, fmt.Errorf("wal: truncate %q at %d: %w", t.name, off, err)
		}
		w.l.mu.RLock()
		defer w.l.mu.RUnlock()
		return t.firstPos, nil
	}
	_, pos, reason := checkRecord(it.Key(), it.Value())
	if reason != "" {
		return 0, &CorruptError{Topic: t.name, Reason: reason}
	}
	return pos + uint64(len(it.Key())+len(it.Value())), nil
}
