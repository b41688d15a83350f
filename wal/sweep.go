package wal

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Sweep reads many topics' logs with one Pebble iterator over the whole record keyspace:
// a reader of many topics (a wildcard subscription) reads them in the order of their keys
// (topic ID, then offset), and each read goes on from where the iterator stands, with no
// new iterator and, when the next topic's records follow the last one read, no seek at all.
// A read per topic with a Scanner of its own costs an iterator and a seek per topic: with
// 100,000 topics of one record each, that was the whole cost of the replay.
//
// I3: every read is bounded by the topic's high-watermark at that read, as Scanner's are;
// the iterator may see records beyond it (Pebble shows a batch before its fsync), which are
// never returned. The iterator is a snapshot of when it was opened: a read that finds a
// durable record missing from it opens a new one and looks again before it reports the
// record missing.
//
// An open iterator pins the store's files and memtables: the caller releases it (Release)
// before anything that may wait for long, and before the Log is closed. One goroutine owns
// a Sweep.
type Sweep struct {
	l     *Log
	s     slab
	rec   Record
	key   [recordKeyLen]byte
	it    *pebble.Iterator // nil when released
	valid bool             // it is positioned on a key
	opens int              // iterators opened so far (tests, Stats)
}

// NewSweep returns a Sweep; it opens no iterator until the first read.
func (l *Log) NewSweep() *Sweep { return &Sweep{l: l, s: slab{alias: true}} }

// Opens is the number of Pebble iterators the Sweep has opened.
func (sw *Sweep) Opens() int { return sw.opens }

// ID is the topic's ID in the log: a reader that reads many topics through a Sweep reads
// them fastest in the order of their IDs. Zero for the zero Instance.
func (in Instance) ID() uint32 {
	if in.t == nil {
		return 0
	}
	return in.t.id
}

// Name is the topic's name; "" for the zero Instance.
func (in Instance) Name() string {
	if in.t == nil {
		return ""
	}
	return in.t.name
}

// Valid reports whether in names a log (it is not the zero Instance).
func (in Instance) Valid() bool { return in.t != nil }

// HeadsOf sets heads[i] to the high-watermark of ins[i] (0 for the zero Instance or a log
// deleted since), all under one hold of the log's read lock and with no lookup by name: for
// a caller that sums the heads of many topics at once (a wildcard's lag metric). The caller
// bounds len(ins), which bounds how long appends wait for the lock.
func (l *Log) HeadsOf(ins []Instance, heads []uint64) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	for i, in := range ins {
		heads[i] = 0
		if in.t != nil && !in.t.deleted {
			heads[i] = in.t.hwm
		}
	}
}

// ReadFunc reads the log in (an Instance the caller took with Log.Instance) from offset
// from, with Log.ReadFunc's contract: at most maxRecords records and maxBytes bytes of
// encoded values (at least one record if any is there), fn given records that point into
// Pebble's memory and are valid only until it returns. more reports that the log has
// durable records after the last one read. A read of an instance deleted since (or of the
// zero Instance) returns a *TopicDeletedError (ErrUnknownTopic); one before the first
// retained offset an *OffsetOutOfRangeError.
func (sw *Sweep) ReadFunc(in Instance, from uint64, maxRecords, maxBytes int, fn func(*Record) error) (n int, more bool, err error) {
	l, t := sw.l, in.t
	if t == nil {
		return 0, false, fmt.Errorf("wal: read: %w", ErrUnknownTopic)
	}
	l.mu.RLock()
	deleted := t.deleted
	v := view{t: t, first: t.first, firstPos: t.firstPos, hwm: t.hwm, hwmPos: t.hwmPos}
	l.mu.RUnlock()
	if deleted {
		return 0, false, fmt.Errorf("wal: read %q: %w", t.name, &TopicDeletedError{Topic: t.name})
	}
	if from < v.first {
		return 0, false, &OffsetOutOfRangeError{Topic: t.name, Offset: from, First: v.first, Next: v.hwm}
	}
	if from >= v.hwm {
		return 0, false, nil
	}
	end := v.hwm
	if maxRecords > 0 && uint64(maxRecords) < end-from {
		end = from + uint64(maxRecords)
	}
	db, err := l.readDB()
	if err != nil {
		return 0, false, fmt.Errorf("wal: read %q: %w", t.name, err)
	}
	defer l.db.RUnlock()
	if err := sw.position(db, t.id, from, false); err != nil {
		return 0, false, fmt.Errorf("wal: read %q: %w", t.name, err)
	}
	next, size := from, 0
	rec := &sw.rec
	reopened := false
	for next < end {
		var key []byte
		id, off := uint32(0), uint64(0)
		if sw.valid {
			key = sw.it.Key()
			id, off, _ = parseRecordKey(key)
		}
		if !sw.valid || id != t.id || off != next {
			if err := sw.it.Error(); err != nil {
				return n, true, fmt.Errorf("wal: read %q at %d: %w", t.name, next, err)
			}
			if !reopened {
				// The iterator may be older than the record: look again with a new one.
				reopened = true
				if err := sw.position(db, t.id, next, true); err != nil {
					return n, true, fmt.Errorf("wal: read %q: %w", t.name, err)
				}
				continue
			}
			return n, true, l.missing(v, next)
		}
		val, err := sw.it.ValueAndErr()
		if err != nil {
			return n, true, fmt.Errorf("wal: read %q at %d: %w", t.name, next, err)
		}
		if maxBytes > 0 && n > 0 && size+len(val) > maxBytes {
			return n, true, nil
		}
		var reason string
		*rec, reason = decodeRecord(key, val, &sw.s)
		if reason != "" {
			return n, true, &CorruptError{Topic: t.name, Offset: next, Reason: reason}
		}
		if err := fn(rec); err != nil {
			return n, true, err
		}
		n++
		size += len(val)
		next++
		sw.valid = sw.it.Next()
	}
	return n, next < v.hwm, nil
}

// sweepSteps is how many keys position steps over with Next before it seeks: a few records
// of a topic the reader skips cost less to step over than a seek.
const sweepSteps = 4

// position puts the iterator on the first key at or after (id, off): where it stands when
// that is the key, a few steps on when it is just before it, else by a seek. fresh opens a
// new iterator first. Caller holds l.db's read lock.
func (sw *Sweep) position(db *pebble.DB, id uint32, off uint64, fresh bool) error {
	if fresh && sw.it != nil {
		_ = sw.it.Close()
		sw.it, sw.valid = nil, false
	}
	putRecordKey(sw.key[:], id, off)
	if sw.it == nil {
		it, err := db.NewIter(&pebble.IterOptions{
			LowerBound: []byte{prefixRecord},
			UpperBound: []byte{prefixRecord + 1},
		})
		if err != nil {
			return err
		}
		sw.it = it
		sw.opens++
		sw.valid = it.SeekGE(sw.key[:])
		return nil
	}
	for range sweepSteps {
		if !sw.valid {
			break
		}
		kid, koff, _ := parseRecordKey(sw.it.Key())
		switch {
		case kid == id && koff == off:
			return nil
		case kid > id || (kid == id && koff > off):
			sw.valid = sw.it.SeekGE(sw.key[:]) // behind the iterator: seek back
			return nil
		}
		sw.valid = sw.it.Next()
	}
	sw.valid = sw.it.SeekGE(sw.key[:])
	return nil
}

// Release closes the Sweep's iterator, if one is open; the next read opens a new one.
func (sw *Sweep) Release() {
	if sw.it == nil {
		return
	}
	sw.l.db.RLock()
	if !sw.l.db.closed { // after Close, Pebble has reported the iterator as leaked
		_ = sw.it.Close()
	}
	sw.l.db.RUnlock()
	sw.it, sw.valid = nil, false
}
