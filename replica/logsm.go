package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// Entry is one committed record entry as the driver hands it to a
// StateMachine: raft's empty entries and configuration changes are not
// records and never reach Apply.
type Entry struct {
	Index uint64 // raft index
	Time  int64  // the proposer's clock at Propose, Unix nanoseconds
	Data  []byte
}

// Result is what applying one entry produced.
type Result struct {
	Index  uint64 // raft index of the entry
	Offset uint64 // offset assigned at apply (I9)
	Time   int64  // timestamp assigned at apply, Unix nanoseconds; never decreases within a group
	// Detail is what a state machine reports beyond the offset: WalSM's is
	// a *wal.AppendResult. nil for LogSM.
	Detail any
}

// StateMachine receives the committed entries of every group of a node, in
// order, on the driver's goroutine. Apply must be deterministic: every
// replica given the same entries must write the same state.
type StateMachine interface {
	// Applied returns the last raft index applied to the group (0 if none),
	// as stored; the driver reads it when it opens the group.
	Applied(group uint64) (uint64, error)
	// Apply applies the group's committed entries up to raft index applied
	// (ents holds the records among them, ascending) by writing into b, and
	// returns one Result per entry it applied. Entries at or below the
	// stored applied index are skipped: after a restart raft may hand them
	// over again. b is committed by the driver, together with the raft
	// state of the same round, after Apply returns.
	Apply(b *pebble.Batch, group, applied uint64, ents []Entry) ([]Result, error)
	// Committed reports that every batch given to Apply so far is committed
	// to Pebble; what Apply wrote may now be read.
	Committed()
}

// LogSM is a StateMachine that keeps, per group, a log of records with dense
// offsets assigned at apply, and the applied index in the same batch (I9).
// Readers see a group's records up to what the driver has committed.
type LogSM struct {
	db *pebble.DB

	// staged is owned by the driver's goroutine: state written into batches
	// not yet committed.
	staged map[uint64]logState
	// fetched is, per group catching up, the next offset of the records
	// fetched for a snapshot not yet installed (driver's goroutine).
	fetched map[uint64]uint64
	// brokenNoRecordCheck, test only, installs a snapshot whose records
	// are not stored (with Config.brokenSkipCatchup).
	brokenNoRecordCheck bool

	mu struct {
		sync.Mutex
		groups map[uint64]logState // state as committed, for readers
	}
}

type logState struct {
	applied  uint64 // last raft index applied
	next     uint64 // next offset
	lastTime int64  // timestamp of offset next-1
}

// Record is one record of a group's log.
type Record struct {
	Offset uint64
	Index  uint64 // raft index it was applied from
	Time   int64
	Data   []byte
}

// NewLogSM returns the log state machine kept in db under the 'L' key space.
func NewLogSM(db *pebble.DB) *LogSM {
	l := &LogSM{db: db, staged: make(map[uint64]logState), fetched: make(map[uint64]uint64)}
	l.mu.groups = make(map[uint64]logState)
	return l
}

// Applied implements StateMachine; it loads the group's state.
func (l *LogSM) Applied(group uint64) (uint64, error) {
	l.mu.Lock()
	st, ok := l.mu.groups[group]
	l.mu.Unlock()
	if ok {
		return st.applied, nil
	}
	k := groupKey(prefixLog, kindApplied, group)
	v, closer, err := l.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		l.setCommitted(group, logState{})
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("replica: group %d: applied state: %w", group, err)
	}
	defer closer.Close()
	p, err := unseal(k, v)
	if err == nil && len(p) != 24 {
		err = fmt.Errorf("%w: key %x: applied state of %d bytes", errCorrupt, k, len(p))
	}
	if err != nil {
		return 0, err
	}
	st = logState{
		applied:  binary.BigEndian.Uint64(p[0:8]),
		next:     binary.BigEndian.Uint64(p[8:16]),
		lastTime: int64(binary.BigEndian.Uint64(p[16:24])),
	}
	l.setCommitted(group, st)
	return st.applied, nil
}

func (l *LogSM) setCommitted(group uint64, st logState) {
	l.mu.Lock()
	l.mu.groups[group] = st
	l.mu.Unlock()
}

// Apply implements StateMachine.
func (l *LogSM) Apply(b *pebble.Batch, group, applied uint64, ents []Entry) ([]Result, error) {
	st, ok := l.staged[group]
	if !ok {
		l.mu.Lock()
		st, ok = l.mu.groups[group]
		l.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("replica: group %d: apply before Applied opened it", group)
		}
	}
	if applied <= st.applied {
		return nil, nil
	}
	var res []Result
	for _, e := range ents {
		if e.Index <= st.applied {
			continue
		}
		if e.Index > applied {
			return nil, fmt.Errorf("replica: group %d: entry %d past the applied index %d", group, e.Index, applied)
		}
		t := max(e.Time, st.lastTime)
		k := indexKey(prefixLog, kindRecord, group, st.next)
		p := make([]byte, 16, 16+len(e.Data))
		binary.BigEndian.PutUint64(p[0:8], e.Index)
		binary.BigEndian.PutUint64(p[8:16], uint64(t))
		if err := b.Set(k, seal(k, append(p, e.Data...)), nil); err != nil {
			return nil, err
		}
		res = append(res, Result{Index: e.Index, Offset: st.next, Time: t})
		st.next++
		st.lastTime = t
	}
	st.applied = applied
	if err := l.stage(b, group, st); err != nil {
		return nil, err
	}
	return res, nil
}

// stage writes group's state into b (applied index, next offset, last time) and holds it
// until Committed publishes it.
func (l *LogSM) stage(b *pebble.Batch, group uint64, st logState) error {
	k := groupKey(prefixLog, kindApplied, group)
	var p [24]byte
	binary.BigEndian.PutUint64(p[0:8], st.applied)
	binary.BigEndian.PutUint64(p[8:16], st.next)
	binary.BigEndian.PutUint64(p[16:24], uint64(st.lastTime))
	if err := b.Set(k, seal(k, p[:]), nil); err != nil {
		return err
	}
	l.staged[group] = st
	return nil
}

// Committed implements StateMachine.
func (l *LogSM) Committed() {
	l.mu.Lock()
	for g, st := range l.staged {
		l.mu.groups[g] = st
	}
	l.mu.Unlock()
	clear(l.staged)
}

// Next returns the group's next offset and applied raft index, as committed.
func (l *LogSM) Next(group uint64) (next, applied uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.mu.groups[group]
	return st.next, st.applied
}

// Read returns up to max records of the group from offset from, never past
// what the driver has committed.
func (l *LogSM) Read(group, from uint64, max int) ([]Record, error) {
	next, _ := l.Next(group)
	if from >= next || max <= 0 {
		return nil, nil
	}
	it, err := l.db.NewIter(&pebble.IterOptions{
		LowerBound: indexKey(prefixLog, kindRecord, group, from),
		UpperBound: indexKey(prefixLog, kindRecord, group, next),
	})
	if err != nil {
		return nil, fmt.Errorf("replica: group %d: read: %w", group, err)
	}
	var recs []Record
	want := from
	for ok := it.First(); ok && len(recs) < max; ok = it.Next() {
		p, err := unseal(it.Key(), it.Value())
		if err == nil && len(p) < 16 {
			err = fmt.Errorf("%w: key %x: short record", errCorrupt, it.Key())
		}
		off := binary.BigEndian.Uint64(it.Key()[10:])
		if err == nil && off != want {
			err = fmt.Errorf("%w: group %d: offset %d where %d was expected", errCorrupt, group, off, want)
		}
		if err != nil {
			return nil, errors.Join(err, it.Close())
		}
		recs = append(recs, Record{
			Offset: off,
			Index:  binary.BigEndian.Uint64(p[0:8]),
			Time:   int64(binary.BigEndian.Uint64(p[8:16])),
			Data:   append([]byte(nil), p[16:]...),
		})
		want++
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return nil, fmt.Errorf("replica: group %d: read: %w", group, err)
	}
	return recs, nil
}
