package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// SetRetention overrides Options.Retention for one topic (existing or not);
// a zero Retention keeps the topic forever. The override lives in memory
// only: the caller sets it again after Open.
func (l *Log) SetRetention(topic string, r Retention) {
	l.mu.Lock()
	l.mu.retention[topic] = r
	l.mu.Unlock()
}

// retentionLoop runs EnforceRetention every Options.RetentionInterval until
// Close.
func (l *Log) retentionLoop() {
	defer l.wg.Done()
	tick := time.NewTicker(l.opts.RetentionInterval)
	defer tick.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-tick.C:
			if err := l.EnforceRetention(); err != nil && l.ctx.Err() == nil {
				l.log.Warn("retention failed", "err", err)
			}
		}
	}
}

// EnforceRetention runs one retention pass now: for each topic it deletes
// (DeleteRange) the records older than MaxAge and the oldest records beyond
// MaxBytes, stores the new first offset in the same synced batch, then
// compacts the deleted range to reclaim space. It never deletes past the
// high-watermark. Passes are serialized.
func (l *Log) EnforceRetention() error {
	l.retentionMu.Lock()
	defer l.retentionMu.Unlock()
	type job struct {
		v view
		r Retention
	}
	var jobs []job
	l.mu.RLock()
	for name, t := range l.mu.topics {
		r, ok := l.mu.retention[name]
		if !ok {
			r = l.opts.Retention
		}
		if r.MaxAge > 0 || r.MaxBytes > 0 {
			jobs = append(jobs, job{v: view{t: t, first: t.first, firstPos: t.firstPos, hwm: t.hwm, hwmPos: t.hwmPos}, r: r})
		}
	}
	l.mu.RUnlock()
	now := l.opts.Now()
	var errs []error
	for _, j := range jobs {
		if err := l.retain(j.v, j.r, now); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// retain applies r to one topic as seen in v.
func (l *Log) retain(v view, r Retention, now time.Time) error {
	cut, cutPos := v.first, v.firstPos
	if r.MaxAge > 0 {
		oldest := now.Add(-r.MaxAge).UnixNano()
		off, pos, err := l.search(v, func(tm int64, _ uint64) bool { return tm >= oldest })
		if err != nil {
			return fmt.Errorf("wal: retention %q: %w", v.t.name, err)
		}
		if off > cut {
			cut, cutPos = off, pos
		}
	}
	if r.MaxBytes > 0 && v.hwmPos-v.firstPos > uint64(r.MaxBytes) {
		target := v.hwmPos - uint64(r.MaxBytes)
		off, pos, err := l.search(v, func(_ int64, pos uint64) bool { return pos >= target })
		if err != nil {
			return fmt.Errorf("wal: retention %q: %w", v.t.name, err)
		}
		if off > cut {
			cut, cutPos = off, pos
		}
	}
	if cut <= v.first {
		return nil
	}
	db, err := l.readDB()
	if err != nil {
		return fmt.Errorf("wal: retention %q: %w", v.t.name, err)
	}
	defer l.db.RUnlock()
	start, end := recordKey(v.t.id, 0), recordKey(v.t.id, cut)
	b := db.NewBatch()
	defer b.Close()
	_ = b.DeleteRange(start, end, nil)
	rk := retentionKey(v.t.id)
	st := binary.LittleEndian.AppendUint64(nil, cut)
	st = binary.LittleEndian.AppendUint64(st, cutPos)
	_ = b.Set(rk, sealMeta(rk, st), nil)
	// Move the first offset before the deletion is applied: Pebble shows the
	// deletion to readers before the commit returns, and a reader must then
	// get OffsetOutOfRange, not a missing durable record. If the commit
	// fails, the records may or may not be deleted: the first offset stays
	// moved (safe either way) and Open recovers it from what is stored.
	l.mu.Lock()
	v.t.first, v.t.firstPos = cut, cutPos
	l.mu.Unlock()
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("wal: retention %q: %w", v.t.name, err)
	}
	l.m.logBytes.Sub(float64(cutPos - v.firstPos))
	l.m.retentionDeleted.Add(float64(cut - v.first))
	l.log.Debug("retention", "topic", v.t.name, "first", cut, "deleted", cut-v.first)
	if err := db.Compact(l.ctx, start, end, false); err != nil && l.ctx.Err() == nil {
		return fmt.Errorf("wal: retention %q: compact: %w", v.t.name, err)
	}
	return nil
}
