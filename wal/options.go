package wal

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/quicmq/quicmq/internal/timeline"
)

// Defaults filled in by Open for zero fields of Options.
const (
	DefaultMaxBatchRecords   = 4096
	DefaultMaxBatchBytes     = 8 << 20
	DefaultRetentionInterval = time.Minute
	DefaultMemTableSize      = 64 << 20
	DefaultCacheSize         = 64 << 20
)

// MaxNameLen is the longest topic or position name the log stores, in bytes.
const MaxNameLen = 255

// Options configures a Log. The zero value is valid: disk, no metrics, no
// retention, the defaults above.
type Options struct {
	// FS is the filesystem Pebble uses. nil: vfs.Default (the disk). Tests
	// use vfs.NewCrashableMem().
	FS vfs.FS
	// Logger receives the log's and Pebble's messages. nil: discard.
	Logger *slog.Logger
	// Registerer gets the quicmq_wal_* metrics. nil: no metrics registered.
	// They are unregistered by Close, so a reopened log can use the same
	// registry.
	Registerer prometheus.Registerer
	// Now is the clock for record timestamps and retention by age. nil:
	// time.Now.
	Now func() time.Time
	// MaxBatchRecords bounds the records of one synced commit. A single
	// request with more records is refused with ErrTooLarge. 0: 4096.
	MaxBatchRecords int
	// MaxBatchBytes bounds the encoded bytes of one synced commit. A single
	// request with more is refused with ErrTooLarge. 0: 8 MiB.
	MaxBatchBytes int
	// Retention is the default for every topic (zero: keep forever).
	// SetRetention overrides it per topic.
	Retention Retention
	// RetentionInterval is how often retention runs. 0: 1 minute; <0: never
	// (EnforceRetention can still be called).
	RetentionInterval time.Duration
	// MemTableSize is Pebble's memtable size in bytes. It must stay well
	// above MaxBatchBytes: Pebble handles a batch of half a memtable or more
	// as a separate flushable, which is slow. 0: 64 MiB.
	MemTableSize int64
	// CacheSize is Pebble's block cache in bytes. 0: 64 MiB.
	CacheSize int64
	// VerifyOnOpen makes Open read back every stored record (Pebble checks
	// each block's checksum, the log each record's CRC and that offsets are
	// dense) and refuse to open on the first problem, naming the file or
	// the topic and offset. It costs a full read of the store; without it
	// damage is found when the damaged part is read (and then reported,
	// never served). Default false.
	VerifyOnOpen bool

	// DedupWindow is how many sequences per (topic, producer) the log
	// remembers to answer a retried publish with its original offset (see
	// dedup.go). It must be at least the publishes a producer has in flight
	// at once. 0: 4096; negative: no de-duplication.
	DedupWindow int
	// DedupMaxProducers caps the (topic, producer) states kept node-wide; the
	// least recently used are dropped first. 0: 65,536.
	DedupMaxProducers int
	// DedupMaxEntries caps the remembered sequences of all producers together
	// (24 bytes each, plus up to as much again of unused ring space). 0: 1 Mi.
	DedupMaxEntries int
	// DedupIdle drops the state of a producer that published nothing to a
	// topic for this long; a retry after it may be stored twice. It also
	// bounds how far back the rebuild after Open looks. 0: 10 minutes.
	DedupIdle time.Duration
	// DedupRebuildRecords bounds the records of a topic's tail scanned to
	// rebuild its producer states after Open. 0: 65,536.
	DedupRebuildRecords int

	// Timeline, if not nil, records Pebble's flushes, compactions and write stalls, for
	// laying a latency episode beside what the store did then (internal/timeline). nil:
	// nothing recorded.
	Timeline *timeline.Recorder

	// testHooks is set by internal tests only.
	testHooks *testHooks
}

// testHooks lets internal tests observe and delay the pipeline.
type testHooks struct {
	// afterApply runs on the committer after a batch was applied to Pebble
	// (visible to Pebble readers, not yet known durable).
	afterApply func()
	// adminApply, if set, is called on the committer with the function that
	// applies an admin operation's batch (topics_admin.go), after the drain
	// of a purge or delete: the crash test wraps it to stall the fsync and
	// take clones.
	adminApply func(apply func())
	// beforeSyncWait runs on the completer before it waits for a batch's
	// sync; blocking here models a slow fsync.
	beforeSyncWait func()
	// ackBeforeSync breaks I2 on purpose: batches are committed without an
	// fsync and acknowledged at once. Only the crash checker's own test sets
	// it, to show that the checker catches exactly this bug.
	ackBeforeSync bool
	// beforeTailScan runs on the caller that reads a recovered topic's tail
	// for its de-duplication windows (awaitRebuild), before it reads.
	beforeTailScan func(topic string)
}

// Retention limits one topic's log. Zero fields are unlimited.
type Retention struct {
	// MaxAge deletes records whose Time is older than now-MaxAge.
	MaxAge time.Duration
	// MaxBytes deletes the oldest records while the topic's stored bytes
	// (keys and encoded values) exceed it.
	MaxBytes int64
}

func (r Retention) validate(prefix string) error {
	var errs []error
	if r.MaxAge < 0 {
		errs = append(errs, fmt.Errorf("wal: %sMaxAge %v is negative", prefix, r.MaxAge))
	}
	if r.MaxBytes < 0 {
		errs = append(errs, fmt.Errorf("wal: %sMaxBytes %d is negative", prefix, r.MaxBytes))
	}
	return errors.Join(errs...)
}

// Validate reports every problem of o at once (errors.Join). Zero fields are
// valid: they take their defaults.
func (o Options) Validate() error {
	var errs []error
	if o.MaxBatchRecords < 0 {
		errs = append(errs, fmt.Errorf("wal: MaxBatchRecords %d is negative", o.MaxBatchRecords))
	}
	if o.MaxBatchBytes < 0 {
		errs = append(errs, fmt.Errorf("wal: MaxBatchBytes %d is negative", o.MaxBatchBytes))
	}
	if o.MemTableSize < 0 {
		errs = append(errs, fmt.Errorf("wal: MemTableSize %d is negative", o.MemTableSize))
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"DedupMaxProducers", int64(o.DedupMaxProducers)}, {"DedupMaxEntries", int64(o.DedupMaxEntries)},
		{"DedupIdle", int64(o.DedupIdle)}, {"DedupRebuildRecords", int64(o.DedupRebuildRecords)}} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("wal: %s %d is negative", f.name, f.v))
		}
	}
	if o.CacheSize < 0 {
		errs = append(errs, fmt.Errorf("wal: CacheSize %d is negative", o.CacheSize))
	}
	if err := o.Retention.validate("Retention."); err != nil {
		errs = append(errs, err)
	}
	d := o.withDefaults()
	if d.MemTableSize < 4*int64(d.MaxBatchBytes) {
		errs = append(errs, fmt.Errorf("wal: MemTableSize %d must be at least 4 x MaxBatchBytes (%d)",
			d.MemTableSize, d.MaxBatchBytes))
	}
	return errors.Join(errs...)
}

// withDefaults returns o with every zero field set to its default: the one
// place defaults are filled in.
func (o Options) withDefaults() Options {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxBatchRecords == 0 {
		o.MaxBatchRecords = DefaultMaxBatchRecords
	}
	if o.MaxBatchBytes == 0 {
		o.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if o.RetentionInterval == 0 {
		o.RetentionInterval = DefaultRetentionInterval
	}
	if o.MemTableSize == 0 {
		o.MemTableSize = DefaultMemTableSize
	}
	if o.CacheSize == 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.DedupWindow == 0 {
		o.DedupWindow = DefaultDedupWindow
	}
	if o.DedupMaxProducers == 0 {
		o.DedupMaxProducers = DefaultDedupMaxProducers
	}
	if o.DedupMaxEntries == 0 {
		o.DedupMaxEntries = DefaultDedupMaxEntries
	}
	if o.DedupIdle == 0 {
		o.DedupIdle = DefaultDedupIdle
	}
	if o.DedupRebuildRecords == 0 {
		o.DedupRebuildRecords = DefaultDedupRebuildRecords
	}
	return o
}
