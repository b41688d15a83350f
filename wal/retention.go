package wal

import (
	"errors"
	"fmt"
	"time"
)

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

// EnforceRetention runs one retention pass now: for each topic, with its own
// retention (TopicConfig) or else Options.Retention, it deletes (DeleteRange)
// the records older than MaxAge and the oldest records beyond MaxBytes, stores
// the new first offset in the same synced batch, then compacts the deleted
// range to reclaim space. It never deletes past the high-watermark. Passes are
// serialized.
func (l *Log) EnforceRetention() error {
	l.retentionMu.Lock()
	defer l.retentionMu.Unlock()
	type job struct {
		v view
		r Retention
	}
	var jobs []job
	l.mu.RLock()
	for _, t := range l.mu.topics {
		r := l.opts.Retention
		if t.cfg.RetentionSet {
			r = t.cfg.Retention
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
	if l.refuseReplicated(v.t.name) != nil {
		return nil // cut by its raft group: see replretain.go
	}
	cut, cutPos, err := l.retentionCut(v, r, now)
	if err != nil {
		return err
	}
	if cut <= v.first {
		return nil
	}
	// The committer applies the cut (topics_admin.go), so that it is ordered
	// with purges and deletes of the topic and a first offset never moves
	// back.
	op := &adminOp{kind: opRetain, t: v.t, cut: cut, cutPos: cutPos}
	if err := l.submitAdmin(l.ctx, v.t.name, op); err != nil {
		return err
	}
	if op.applied {
		l.compactRecords(op.prevFirst, op.cutTo, v.t, v.t.name)
	}
	return nil
}

// retentionCut is the first offset r keeps of the topic as seen in v at now (v.first when
// it keeps everything), with its byte position; never past v's high-watermark.
func (l *Log) retentionCut(v view, r Retention, now time.Time) (cut, cutPos uint64, err error) {
	cut, cutPos = v.first, v.firstPos
	if r.MaxAge > 0 {
		oldest := now.Add(-r.MaxAge).UnixNano()
		off, pos, err := l.search(v, func(tm int64, _ uint64) bool { return tm >= oldest })
		if err != nil {
			return 0, 0, fmt.Errorf("wal: retention %q: %w", v.t.name, err)
		}
		if off > cut {
			cut, cutPos = off, pos
		}
	}
	if r.MaxBytes > 0 && v.hwmPos-v.firstPos > uint64(r.MaxBytes) {
		target := v.hwmPos - uint64(r.MaxBytes)
		off, pos, err := l.search(v, func(_ int64, pos uint64) bool { return pos >= target })
		if err != nil {
			return 0, 0, fmt.Errorf("wal: retention %q: %w", v.t.name, err)
		}
		if off > cut {
			cut, cutPos = off, pos
		}
	}
	return cut, cutPos, nil
}
