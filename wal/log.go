package wal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// separatedValueMin is the smallest value Pebble stores in a blob file rather than in its
// sstables (see Open). Below it the handle and the indirection cost more than the copies
// that compactions make; CockroachDB's default is 256 bytes.
const separatedValueMin = 256

// Log is the set of topic logs of one node, stored in one Pebble DB.
// All methods are safe for concurrent use.
type Log struct {
	opts Options
	log  *slog.Logger
	m    *metrics
	dir  string // Pebble's directory, also of the clean-close marker

	// pdb is Pebble. Methods that use it hold db.RLock and check db.closed,
	// so Close never closes Pebble under a reader.
	pdb *pebble.DB
	db  struct {
		sync.RWMutex
		closed bool
	}

	// q is the append queue: producers push requests, the committer takes
	// them all at once.
	q struct {
		sync.Mutex
		reqs   []*request
		closed bool
	}
	wake     chan struct{}  // capacity 1: a queued request or Close wakes the committer
	inflight chan *inflight // committer -> completer, in commit (= offset) order
	// failed holds the first commit failure; once set, nothing is appended.
	failed atomic.Pointer[error]

	// c is owned by the committer goroutine (and by Open before it starts). It keeps no
	// map of its own of the topics: it finds a topic among the durable ones (mu.topics)
	// or among those it created that are not durable yet (repl.local), committerTopic;
	// a second map of every topic was a map entry more per topic for each GC to mark
	// (issue 34's figure 3: a region mirroring 10,000 idle topics holds 10,000 more).
	c struct {
		// deleted names the topics deleted since Open and not created again:
		// a position written alone for one of them is refused.
		deleted map[string]struct{}
		nextID  uint32 // the next topic ID to hand out (stored at nextIDKey)
		// lastStamp is the largest record time assigned since Open (recovered: the
		// largest of the topics' last records), for ClockMark (clockmark.go).
		lastStamp int64
		slab      []*topic // scratch: topics touched by the batch being built
		dedup     dedup    // producer windows (dedup.go)
	}

	// mu guards what readers see: only durable state.
	mu struct {
		sync.RWMutex
		// topics are the durable topics, local and replicated. The committer reads it too
		// (committerTopic) for the fields it owns of a local topic's struct.
		topics map[string]*topic
		// created names the topics in the order they became durable (recovered ones
		// first), each time one did: CreatedSince reads it instead of listing every topic.
		// created[i] is mark createdBase+i: the oldest names are dropped when topics are
		// created and deleted over and over (createdLocked).
		created     []string
		createdBase int
		// positions are the durable positions by name, then by topic (positionSet): a
		// listing by name or name prefix (Positions, PositionNames, DeletePosition) looks
		// at the names, then at the selected names' positions only, not at every position
		// (a mirroring node holds a cursor per mirrored topic).
		positions positionSet
		// deleted maps the names of topics deleted since Open (and not created
		// again) to their old IDs, so that a reader learns why a topic is gone.
		deleted map[string]uint32
	}

	watch watchers

	repl replState // which topics are replicated (replicated.go)

	// clockFloor is the least time the committer gives a record from now on: raised by
	// ClockMark and RaiseClock (clockmark.go), so that a mark stays below every later record.
	clockFloor atomic.Int64

	stats struct {
		appends, records, bytes, commits           atomic.Uint64
		duplicates, refused, rebuilt, rebuildNanos atomic.Uint64
		dedupStates, dedupEntries                  atomic.Int64
	}

	retentionMu sync.Mutex // serializes EnforceRetention passes
	// groupMu orders group state stores (SetGroup, DeleteGroup) with the purge and delete of
	// a topic, which rewrite or remove the groups' states of it (groups_admin.go).
	groupMu sync.Mutex

	ctx       context.Context // cancelled by Close: stops retention work
	cancel    context.CancelFunc
	wg        sync.WaitGroup // committer, completer, retention loop
	closeOnce sync.Once
	closeErr  error
}

// topic is one topic's log.
//
// The fields that hold pointers come first: the GC scans an object up to its last pointer,
// and a node holds one topic per topic of its log, most of them idle (a region mirroring
// 10,000 idle topics holds 10,000 more; issue 34's figure 3; TestTopicPointersLead). Its four
// flags sit beside id, in what would otherwise be padding, so that the struct fits the
// allocator's 176-byte class rather than 192: a region holds one per topic on every replica
// (TestTopicStructSize).
type topic struct {
	name string
	// Owned by the committer: the de-duplication windows by producer ID (dedup.go).
	producers map[string]*producerState
	// The read of a recovered topic's tail for its de-duplication windows,
	// made by the first caller that needs them (dedup.go).
	rb rebuildGate

	id uint32

	touched bool // in the batch being built (committer scratch)
	// stagedLocal: the batch being built appends to the topic a record first published in
	// this region (OriginRegion ""), not only mirrored ones (committer scratch, WatchAdvances).
	stagedLocal bool
	// dedupReady: the de-duplication windows (producers) were rebuilt from the log since
	// Open (dedup.go); committer-owned.
	dedupReady bool
	// deleted: the topic was deleted (readers that hold the *topic then get a
	// *TopicDeletedError); guarded by Log.mu.
	deleted bool

	// Owned by the committer: the next offset to assign, its byte position,
	// and the Time of the last assigned record.
	next, nextPos uint64
	lastTime      int64

	// ccfg is the configuration as the committer last wrote it (durable or
	// not); committer-owned.
	ccfg TopicConfig

	// Guarded by Log.mu: the first retained offset and the high-watermark
	// (next durable offset), each with its byte position; and the durable
	// configuration.
	first, firstPos uint64
	hwm, hwmPos     uint64
	cfg             TopicConfig

	// group is the raft group of a replicated topic (0: a local topic): set when
	// it is bound or loaded, before the topic is shared, then read-only.
	group uint64
}

type posName struct{ name, topic string }

// Open opens (creating if needed) the log stored in dir, recovers every
// topic's first offset, next offset, high-watermark and every position, and
// starts the committer, completer and retention goroutines; Close stops them.
func Open(dir string, opts Options) (*Log, error) {
	if dir == "" {
		return nil, fmt.Errorf("wal: open: %w: empty directory", ErrInvalidRequest)
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	l := &Log{
		opts:     opts,
		dir:      dir,
		log:      opts.Logger.With("component", "wal"),
		wake:     make(chan struct{}, 1),
		inflight: make(chan *inflight, 1024),
	}
	l.c.deleted = make(map[string]struct{})
	l.c.dedup.init(opts)
	l.mu.topics = make(map[string]*topic)
	l.mu.positions = make(positionSet)
	l.mu.deleted = make(map[string]uint32)
	l.watch.init()

	popts := &pebble.Options{
		FS:                 opts.FS,
		Logger:             pebbleLogger{opts.Logger.With("component", "pebble")},
		FormatMajorVersion: pebble.FormatNewest,
		MemTableSize:       uint64(opts.MemTableSize),
		CacheSize:          opts.CacheSize,
		// Pebble's default answer to a checksum mismatch is Logger.Fatalf,
		// which would take the whole node down for one damaged block. The
		// read that found it gets the error (naming the file) anyway; the
		// node stays up for every topic that is intact.
		EventListener: storeEvents(l.log, opts.Timeline),
	}
	// Reads are scans of one topic's dense keys, which read-triggered compactions do not
	// help; sampling them cost 6% of a replay's log read.
	popts.Experimental.ReadSamplingMultiplier = -1
	// A log's values are written once and read in order, never updated: compactions that
	// rewrite them are pure cost (a third of an R1 node's CPU under durable publishing went
	// to flushes and compactions, half of that copying and compressing the records). Values
	// of separatedValueMin bytes or more go to blob files at flush, which compactions leave
	// alone (they move only keys and handles), and every level compresses with Pebble's
	// fastest profile (MinLZ) rather than Snappy. The store's format (FormatNewest) has
	// allowed blob files since Pebble v2.1, so this is a writing policy only: a build
	// without it reads such a store as it is.
	popts.Experimental.ValueSeparationPolicy = func() pebble.ValueSeparationPolicy {
		return pebble.ValueSeparationPolicy{
			Enabled:               true,
			MinimumSize:           separatedValueMin,
			MaxBlobReferenceDepth: 10,
			// Records die in offset order (retention, topic deletion, raft log compaction),
			// so a blob file mostly dies whole; one with some live values left is rewritten
			// once a fifth of it is garbage and it is old enough not to die soon anyway.
			RewriteMinimumAge:  5 * time.Minute,
			TargetGarbageRatio: 0.2,
		}
	}
	popts.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return pebble.DBCompressionFastest })
	pdb, err := pebble.Open(dir, popts)
	if err != nil {
		return nil, fmt.Errorf("wal: open %s: %w", dir, err)
	}
	l.pdb = pdb
	if err := l.recover(); err != nil {
		return nil, errors.Join(err, pdb.Close())
	}
	if err := l.checkCloseMark(); err != nil {
		return nil, errors.Join(err, pdb.Close())
	}
	if opts.VerifyOnOpen {
		st, err := l.verify(context.Background(), pdb)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("wal: open %s: verify: %w", dir, err), pdb.Close())
		}
		l.log.Info("verified", "topics", st.Topics, "records", st.Records, "bytes", st.Bytes)
	}
	m, err := newMetrics(opts.Registerer, l)
	if err != nil {
		return nil, errors.Join(err, pdb.Close())
	}
	l.m = m
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wg.Add(2)
	go l.commitLoop()
	go l.completeLoop()
	if opts.RetentionInterval > 0 {
		l.wg.Add(1)
		go l.retentionLoop()
	}
	l.log.Info("opened", "dir", dir, "topics", len(l.mu.topics), "positions", l.mu.positions.count())
	return l, nil
}

// Close fails appends still queued with ErrClosed, waits for batches already
// handed to Pebble to become durable (their callbacks run), stops every
// goroutine and closes Pebble. It is safe to call twice.
func (l *Log) Close() error {
	l.closeOnce.Do(func() {
		l.q.Lock()
		l.q.closed = true
		l.q.Unlock()
		l.signal()
		l.cancel()
		l.wg.Wait()
		l.db.Lock()
		l.db.closed = true
		err := l.pdb.Close()
		l.db.Unlock()
		l.m.unregister()
		if err == nil && l.failed.Load() == nil {
			// Every high-watermark is durable now: record them for the next
			// Open (see closemark.go).
			if merr := l.writeCloseMark(); merr != nil {
				err = fmt.Errorf("write %s: %w", closeMarkFile, merr)
			}
		}
		if err != nil {
			l.closeErr = fmt.Errorf("wal: close: %w", err)
		}
		l.log.Info("closed")
	})
	return l.closeErr
}

// readDB returns Pebble with db.RLock held, or ErrClosed. The caller must
// call l.db.RUnlock when it is done with Pebble.
func (l *Log) readDB() (*pebble.DB, error) {
	l.db.RLock()
	if l.db.closed {
		l.db.RUnlock()
		return nil, ErrClosed
	}
	return l.pdb, nil
}

// recover loads topics and positions. It runs in Open before any goroutine.
func (l *Log) recover() error {
	it, err := l.pdb.NewIter(&pebble.IterOptions{
		LowerBound: []byte{prefixTopic},
		UpperBound: []byte{prefixTopic + 1},
	})
	if err != nil {
		return fmt.Errorf("wal: recover topics: %w", err)
	}
	var topics []*topic
	for ok := it.First(); ok; ok = it.Next() {
		val, err := it.ValueAndErr()
		if err != nil {
			return errors.Join(fmt.Errorf("wal: recover topics: %w", err), it.Close())
		}
		p, reason := openMeta(it.Key(), val, 4)
		name := string(it.Key()[1:])
		if reason != "" {
			return errors.Join(&CorruptError{Topic: name, Reason: reason}, it.Close())
		}
		t := &topic{name: name, id: binary.BigEndian.Uint32(p)}
		topics = append(topics, t)
		if t.id >= l.c.nextID {
			l.c.nextID = t.id + 1
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return fmt.Errorf("wal: recover topics: %w", err)
	}
	if err := l.recoverNextID(); err != nil {
		return err
	}
	for _, t := range topics {
		if err := l.recoverTopic(t); err != nil {
			return err
		}
		if err := l.recoverConfig(t); err != nil {
			return err
		}
		t.rb.needed = true
		l.c.lastStamp = max(l.c.lastStamp, t.lastTime)
		l.mu.topics[t.name] = t
		l.createdLocked(t.name)
	}
	return l.recoverPositions()
}

// recoverTopic sets t's bounds from its retention state and its first and
// last stored records. Everything Pebble recovered is durable now, so the
// high-watermark is the next offset.
func (l *Log) recoverTopic(t *topic) error {
	rk := retentionKey(t.id)
	switch val, closer, err := l.pdb.Get(rk); {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return fmt.Errorf("wal: recover %q: %w", t.name, err)
	default:
		p, reason := openMeta(rk, val, 16)
		if reason == "" {
			t.first = binary.LittleEndian.Uint64(p)
			t.firstPos = binary.LittleEndian.Uint64(p[8:])
		}
		_ = closer.Close()
		if reason != "" {
			return &CorruptError{Topic: t.name, Reason: "retention state: " + reason}
		}
	}
	it, err := l.pdb.NewIter(&pebble.IterOptions{
		LowerBound: recordKey(t.id, 0),
		UpperBound: recordKey(t.id, math.MaxUint64),
	})
	if err != nil {
		return fmt.Errorf("wal: recover %q: %w", t.name, err)
	}
	defer it.Close()
	t.next, t.nextPos = t.first, t.firstPos
	if it.First() {
		off, _, pos, err := l.checkIter(t, it)
		if err != nil {
			return err
		}
		if off >= t.first {
			t.first, t.firstPos = off, pos
		}
		if !it.Last() {
			return fmt.Errorf("wal: recover %q: %w", t.name, it.Error())
		}
		off, tm, pos, err := l.checkIter(t, it)
		if err != nil {
			return err
		}
		t.next = off + 1
		t.nextPos = pos + uint64(len(it.Key())+len(it.Value()))
		t.lastTime = tm
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("wal: recover %q: %w", t.name, err)
	}
	t.hwm, t.hwmPos = t.next, t.nextPos
	return nil
}

// checkIter verifies the record under it and returns its offset, time and
// byte position.
func (l *Log) checkIter(t *topic, it *pebble.Iterator) (off uint64, tm int64, pos uint64, err error) {
	_, off, ok := parseRecordKey(it.Key())
	val, err := it.ValueAndErr()
	if err != nil {
		return 0, 0, 0, fmt.Errorf("wal: read %q: %w", t.name, err)
	}
	if !ok {
		return 0, 0, 0, &CorruptError{Topic: t.name, Reason: "malformed key"}
	}
	tm, pos, reason := checkRecord(it.Key(), val)
	if reason != "" {
		return 0, 0, 0, &CorruptError{Topic: t.name, Offset: off, Reason: reason}
	}
	return off, tm, pos, nil
}

func (l *Log) recoverPositions() error {
	it, err := l.pdb.NewIter(&pebble.IterOptions{
		LowerBound: []byte{prefixPosition},
		UpperBound: []byte{prefixPosition + 1},
	})
	if err != nil {
		return fmt.Errorf("wal: recover positions: %w", err)
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		topic, name, ok := parsePositionKey(it.Key())
		if !ok {
			return &CorruptError{Reason: fmt.Sprintf("malformed position key %q", it.Key())}
		}
		val, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("wal: recover positions: %w", err)
		}
		pv, reason := decodePosition(it.Key(), val)
		if reason != "" {
			return &CorruptError{Reason: fmt.Sprintf("position %q of %q: %s", name, topic, reason)}
		}
		l.setPositionLocked(posName{name: name, topic: topic}, pv)
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("wal: recover positions: %w", err)
	}
	return nil
}

// pebbleLogger routes Pebble's messages to slog. Pebble expects Fatalf not
// to return; it panics after logging, as Pebble's own default does by
// exiting.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg, "fatal", true)
	panic("wal: pebble fatal: " + msg)
}
