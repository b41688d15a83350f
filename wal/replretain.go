package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Cuts and configuration of replicated topics: every replica of a topic must delete the
// same records, so retention, purge and per-topic retention are raft entries that
// package replica applies through these methods, in the batch of the entry, like any
// other replicated state. A cut stores the topic's new first offset in the same batch
// (the key retention stores it under for a local topic), so Open recovers it as for any
// topic; offsets keep going (I1). The compaction that reclaims the deleted range runs on
// a goroutine of the Log after the batch is published (compactLoop).

// CutResult is what a Cut deleted.
type CutResult struct {
	First uint64 // the first offset before the cut
	Cut   uint64 // the first offset after it
	Next  uint64 // the topic's next offset
}

// First returns the first offset a bound topic keeps, as written (published or not).
func (w *ReplicaWriter) First(topic string) (uint64, bool) {
	t := w.bound(topic)
	if t == nil {
		return 0, false
	}
	w.l.mu.RLock()
	defer w.l.mu.RUnlock()
	return t.first, true
}

// Cut deletes, in b, the bound topic's records below offset cut and stores cut as its
// first offset. cut is clamped to the topic's next offset unless jump is set: then a
// cut past the next offset (a snapshot whose log starts past this replica's end) also
// moves the next offset to it, the log being empty. A cut at or below the first offset
// deletes nothing.
func (w *ReplicaWriter) Cut(b *pebble.Batch, topic string, cut uint64, jump bool) (CutResult, error) {
	t := w.bound(topic)
	if t == nil {
		return CutResult{}, fmt.Errorf("wal: cut %q: %w: topic not bound", topic, ErrInvalidRequest)
	}
	l := w.l
	l.mu.RLock()
	first, firstPos := t.first, t.firstPos
	l.mu.RUnlock()
	if cut > t.next && !jump {
		cut = t.next
	}
	res := CutResult{First: first, Cut: first, Next: t.next}
	if cut <= first {
		return res, nil
	}
	var cutPos uint64
	switch {
	case cut >= t.next:
		cutPos = t.nextPos
	default:
		pos, err := w.posAt(t, cut)
		if err != nil {
			return CutResult{}, err
		}
		cutPos = pos
	}
	if err := b.DeleteRange(recordKey(t.id, 0), recordKey(t.id, cut), nil); err != nil {
		return CutResult{}, fmt.Errorf("wal: cut %q at %d: %w", topic, cut, err)
	}
	rk := retentionKey(t.id)
	st := binary.LittleEndian.AppendUint64(nil, cut)
	st = binary.LittleEndian.AppendUint64(st, cutPos)
	if err := b.Set(rk, sealMeta(rk, st), nil); err != nil {
		return CutResult{}, fmt.Errorf("wal: cut %q at %d: %w", topic, cut, err)
	}
	if cut > t.next { // jump: an empty log that starts at cut
		t.next, t.nextPos = cut, cutPos
	}
	// Readers stop at the new first offset before Pebble shows the deletion (as
	// cutLocked does for a local topic); the high-watermark follows at Published.
	l.mu.Lock()
	t.first, t.firstPos = cut, cutPos
	if t.hwm < cut {
		t.hwm, t.hwmPos = cut, cutPos
	}
	l.mu.Unlock()
	w.cuts = append(w.cuts, cutDone{t: t, from: first, to: cut, bytes: cutPos - min(cutPos, firstPos)})
	res.Cut, res.Next = cut, t.next
	return res, nil
}

// stagedPos is the byte position of a record of t appended since the last Published.
func (w *ReplicaWriter) stagedPos(t *topic, off uint64) (uint64, bool) {
	sp := w.spos[t]
	if sp == nil || off < sp.from || off-sp.from >= uint64(len(sp.pos)) {
		return 0, false
	}
	return sp.pos[off-sp.from], true
}

// stagePos records the byte position of t's record at off (Append, AppendFetched).
func (w *ReplicaWriter) stagePos(t *topic, off, pos uint64) {
	sp := w.spos[t]
	if sp == nil || sp.from+uint64(len(sp.pos)) != off {
		if n := len(w.freeSpos); n > 0 {
			sp = w.freeSpos[n-1]
			w.freeSpos[n-1] = nil
			w.freeSpos = w.freeSpos[:n-1]
			sp.from, sp.pos = off, sp.pos[:0]
		} else {
			sp = &stagedPositions{from: off}
		}
		w.spos[t] = sp
	}
	sp.pos = append(sp.pos, pos)
}

// Bounds of what recycleSpos keeps for the next rounds.
const (
	maxFreeSpos    = 4096 // staged positions kept
	maxFreeSposLen = 1024 // positions each
)

// recycleSpos empties spos, keeping its staged positions for stagePos to reuse: one topic's
// new ones (a struct and a slice) per round were two allocations per record on a replica
// taking one-record publishes over many topics (issue 29).
func (w *ReplicaWriter) recycleSpos() {
	for _, sp := range w.spos {
		if len(w.freeSpos) < maxFreeSpos && cap(sp.pos) <= maxFreeSposLen {
			w.freeSpos = append(w.freeSpos, sp)
		}
	}
	clear(w.spos)
}

type stagedPositions struct {
	from uint64
	pos  []uint64
}

type cutDone struct {
	t        *topic
	from, to uint64
	bytes    uint64
}

// SetTopicConfig stores cfg as the configuration of a bound topic in b (as
// Log.SetTopicConfig stores a local topic's); readers see it at the next Published.
func (w *ReplicaWriter) SetTopicConfig(b *pebble.Batch, topic string, cfg TopicConfig) error {
	t := w.bound(topic)
	if t == nil {
		return fmt.Errorf("wal: configure %q: %w: topic not bound", topic, ErrInvalidRequest)
	}
	if err := cfg.Retention.validate("Retention."); err != nil {
		return fmt.Errorf("wal: configure %q: %w: %w", topic, ErrInvalidRequest, err)
	}
	k := configKey(t.id)
	var err error
	if cfg == (TopicConfig{}) {
		err = b.Delete(k, nil)
	} else {
		err = b.Set(k, sealMeta(k, encodeConfig(cfg)), nil)
	}
	if err != nil {
		return fmt.Errorf("wal: configure %q: %w", topic, err)
	}
	t.ccfg = cfg
	w.configs = append(w.configs, t)
	return nil
}

// RetentionCut is the first offset that retention keeps of a replicated topic now, by its
// own retention (TopicConfig) or else Options.Retention, by the log's clock (Options.Now);
// never past the high-watermark (what its group has committed and applied here). ok is
// false when nothing is to be cut. The leader of the topic's group proposes it: followers
// never decide a cut.
func (l *Log) RetentionCut(topic string) (cut uint64, ok bool, err error) {
	v, found := l.view(topic)
	if !found {
		return 0, false, nil
	}
	l.mu.RLock()
	r := l.opts.Retention
	if v.t.cfg.RetentionSet {
		r = v.t.cfg.Retention
	}
	l.mu.RUnlock()
	if r.MaxAge <= 0 && r.MaxBytes <= 0 {
		return 0, false, nil
	}
	cut, _, err = l.retentionCut(v, r, l.opts.Now())
	if err != nil {
		return 0, false, err
	}
	return cut, cut > v.first, nil
}

// RetentionInterval is how often retention runs (Options.RetentionInterval with its
// default; negative: never on its own).
func (l *Log) RetentionInterval() time.Duration { return l.opts.RetentionInterval }

// compactJob is a deleted record range of a topic for compactLoop.
type compactJob struct {
	t        *topic
	from, to uint64
}

// compactLoop compacts the record ranges replicated cuts deleted, off the goroutine that
// applies raft entries. It runs from ReplicaWriter until Close.
func (l *Log) compactLoop(jobs <-chan compactJob) {
	defer l.wg.Done()
	for {
		select {
		case <-l.ctx.Done():
			return
		case j := <-jobs:
			l.compactRecords(j.from, j.to, j.t, j.t.name)
		}
	}
}

// publishCuts makes the staged cuts and configurations visible (Published).
func (w *ReplicaWriter) publishCuts() {
	l := w.l
	if len(w.configs) > 0 {
		l.mu.Lock()
		for _, t := range w.configs {
			t.cfg = t.ccfg
		}
		l.mu.Unlock()
		w.configs = w.configs[:0]
	}
	for _, c := range w.cuts {
		l.m.logBytes.Sub(float64(c.bytes))
		l.m.retentionDeleted.Add(float64(c.to - c.from))
		l.log.Debug("replicated cut", "topic", c.t.name, "first", c.to, "deleted", c.to-c.from)
		l.watch.wakeTopic(c.t.name, c.t.id) // readers behind the cut learn of it now
		select {
		case w.compact <- compactJob{t: c.t, from: c.from, to: c.to}:
		default: // the compactor is behind: Pebble reclaims the space later
		}
	}
	w.cuts = w.cuts[:0]
	w.recycleSpos()
	clear(w.stagedGroups)
	if len(w.forgotten) > 0 {
		l.repl.mu.Lock() // the refusals see a forgotten topic's old or new *topic, not neither
		l.mu.Lock()
		w.renewForgottenLocked()
		l.mu.Unlock()
		l.repl.mu.Unlock()
		for _, t := range w.forgotten {
			l.watch.wakeTopic(t.name, t.id) // its readers learn of the delete now
		}
		w.forgotten = w.forgotten[:0]
	}
}

// Forget removes, in b, what a bound topic's log is described by besides its records: every
// named position of it (consumer positions, mirror cursors), every consumer group's state
// of it and its configuration; with a cut of every record (Cut), it is the delete of a
// replicated topic (the topic stays bound, empty, and its offsets keep going). It returns
// how many positions and group states it removed. What it removes is the same on every
// replica at the same entry: the stored keys and those staged in b alike.
func (w *ReplicaWriter) Forget(b *pebble.Batch, topic string) (positions, groups int, err error) {
	t := w.bound(topic)
	if t == nil {
		return 0, 0, fmt.Errorf("wal: forget %q: %w: topic not bound", topic, ErrInvalidRequest)
	}
	pp := positionTopicPrefix(topic)
	if err := b.DeleteRange(pp, prefixEnd(pp), nil); err != nil {
		return 0, 0, fmt.Errorf("wal: forget %q: %w", topic, err)
	}
	names := map[string]bool{}
	w.l.mu.RLock()
	for _, name := range w.l.mu.positions.namesOn(topic) {
		names[name] = true
	}
	w.l.mu.RUnlock()
	for k := range w.staged {
		if k.topic == topic {
			names[k.name] = true
			delete(w.staged, k)
		}
	}
	for name := range names {
		w.positions = append(w.positions, posWrite{key: posName{name: name, topic: topic}, del: true})
	}
	gs := map[string]bool{}
	for g := range w.stagedGroups[topic] {
		gs[g] = true
	}
	it, err := w.l.pdb.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixGroup}, UpperBound: []byte{prefixGroup + 1}})
	if err != nil {
		return 0, 0, fmt.Errorf("wal: forget %q: %w", topic, err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		if g, tp, ok := parseGroupKey(it.Key()); ok && tp == topic && tp != "" {
			gs[g] = true
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return 0, 0, fmt.Errorf("wal: forget %q: %w", topic, err)
	}
	for g := range gs {
		k := groupKey(g, topic)
		if err := b.Delete(k, nil); err != nil {
			return 0, 0, fmt.Errorf("wal: forget %q: %w", topic, err)
		}
		delete(w.groups, string(k)) // a mirrored state after this in the batch compares with nothing
	}
	delete(w.stagedGroups, topic)
	if err := w.SetTopicConfig(b, topic, TopicConfig{}); err != nil {
		return 0, 0, err
	}
	w.forgotten = append(w.forgotten, t)
	return len(names), len(gs), nil
}

// renewForgotten gives each topic forgotten since the last Published a new *topic with the
// same ID and bounds, so that readers bound to the old one (Scanners, subscriptions) get a
// *TopicDeletedError, as after the delete of a local topic, and new readers read on.
// Published, with l.repl.mu and l.mu held.
func (w *ReplicaWriter) renewForgottenLocked() {
	for _, old := range w.forgotten {
		if w.boundLocked(old.name) != old {
			continue // forgotten twice in one batch
		}
		nt := &topic{name: old.name, id: old.id, next: old.next, nextPos: old.nextPos, lastTime: old.lastTime,
			dedupReady: true, ccfg: old.ccfg, first: old.first, firstPos: old.firstPos,
			hwm: old.hwm, hwmPos: old.hwmPos, cfg: old.cfg, group: old.group}
		w.l.mu.topics[old.name] = nt
		old.deleted = true // its readers (a Sweep's) learn of the delete
	}
}
