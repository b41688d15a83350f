package replica

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/quicmq/quicmq/internal/timeline"
)

// Config configures a Driver. Fields left zero take the defaults named on
// each; NodeID, DB, StateMachine and Transport are required.
type Config struct {
	// NodeID is this node's raft ID in every group; never 0, never reused.
	NodeID uint64
	// DB is the node's Pebble DB; the driver writes the 'R' key space of
	// every group in it (and the state machine its own). Not closed by the
	// driver.
	DB *pebble.DB
	// StateMachine receives committed entries.
	StateMachine StateMachine
	// Transport carries raft messages to the other nodes.
	Transport Transport

	// TickInterval is the duration of one raft tick in Run. Default 100 ms.
	TickInterval time.Duration
	// ElectionTicks is raft's election timeout in ticks. Default 10.
	ElectionTicks int
	// HeartbeatTicks is the leader's heartbeat interval in ticks. Default 1.
	HeartbeatTicks int
	// QuiesceAfterTicks is how many ticks a group must be idle (no
	// proposal, every follower caught up, everything applied) before its
	// leader quiesces it: one last heartbeat, then no ticks or heartbeats
	// until a proposal or a message wakes it. Default ElectionTicks.
	QuiesceAfterTicks int
	// DisableQuiescence keeps every group ticking.
	DisableQuiescence bool
	// MaxSizePerMsg bounds the bytes of entries in one append message.
	// Default 1 MiB.
	MaxSizePerMsg uint64
	// MaxInflightMsgs bounds the append messages in flight per follower.
	// Default 256.
	MaxInflightMsgs int
	// MaxUncommittedBytes bounds the payload bytes a leader holds
	// uncommitted per group; proposals past it are refused
	// (raft.ErrProposalDropped). Default 64 MiB.
	MaxUncommittedBytes uint64
	// EntryCacheBytes bounds, per group, the newest durable raft entries
	// kept in memory (protobuf size), from which the driver reads entries
	// back when they commit and when it sends them to a follower, instead
	// of reading Pebble. Default 16 MiB; the cache holds little more than
	// the entries not yet compacted away (LogCompaction).
	EntryCacheBytes uint64
	// LogCompaction makes each group's leader, every LogCompactEvery
	// applied entries, propose the discarding of the log up to the index
	// every replica has stored and this node has applied, so that the raft
	// copy of a record dies young (in Pebble's memtable) instead of being
	// flushed and compacted beside the applied record. A follower behind
	// keeps at most LogTailEntries applied entries for it; a replica
	// further behind than what its peers still hold (one down that long,
	// or restarted with an empty disk) catches up through a snapshot
	// (metadata only) and the records fetched from a peer (Fetcher). Off by
	// default in the package (the node turns it on).
	LogCompaction bool
	// Fetcher fetches records from a peer for a replica that installs a
	// snapshot (catchup.go); the node passes its peer links. Without one a
	// replica that needs a snapshot stays behind (its catch-ups fail).
	Fetcher Fetcher
	// CatchupBytesPerSecond paces a catch-up's fetch, per group. Default
	// 64 MiB/s; negative: unpaced.
	CatchupBytesPerSecond int64
	// CatchupChunkBytes bounds the record bytes of one fetched chunk (each
	// is one unsynced Pebble batch on the driver's goroutine). Default
	// 256 KiB.
	CatchupChunkBytes uint64
	// CatchupStreams is how many of a catch-up's logs (topics) are fetched at
	// once, each on a fetch stream of its own: a group holds many topics, and
	// one at a time a catch-up would wait a round trip per topic. The pace
	// (CatchupBytesPerSecond) is shared. Default 8.
	CatchupStreams int
	// SnapshotReportTicks is how long a leader waits for a follower to
	// answer a snapshot (it may be fetching the records) before it reports
	// the snapshot failed to raft, which then probes and sends a newer one
	// if still needed. Default 4 x ElectionTicks.
	SnapshotReportTicks int
	// LogCompactEvery is how many applied entries pass between two
	// compactions a leader proposes (each is one small raft entry).
	// Default 64.
	LogCompactEvery uint64
	// LogCompactBytes is how many bytes of applied entries pass between two compactions a
	// leader proposes, whichever of it and LogCompactEvery comes first. A busy group's
	// entries carry up to 1 MiB each: 64 of them outlived Pebble's memtable (64 MiB,
	// shared with the records they apply), so the raft copy of a record was flushed to
	// disk and compacted away later instead of dying in the memtable. Default 4 MiB.
	LogCompactBytes uint64
	// LogTailEntries is the most applied entries a log keeps for a
	// follower that is behind, with LogCompaction. Default 10,000.
	LogTailEntries uint64
	// InboxSize is the number of inbound message batches Run buffers; when
	// full, Deliver drops (raft recovers lost messages). Default 1024.
	InboxSize int
	// Now is the clock whose reading a proposal carries as its timestamp.
	// Default time.Now.
	Now func() time.Time
	// Logger receives the driver's and raft's logs. Default: discarded.
	Logger *slog.Logger
	// Timeline, if not nil, records the engine's rounds and the syncs it waits for, and
	// a catch-up's chunks written and served (internal/timeline). Default: nothing.
	Timeline *timeline.Recorder

	// handOverProposals, benchmark only, hands each proposal to Run and
	// waits until Run takes it (the driver before the proposal queue).
	handOverProposals bool
	// noEntryCache, benchmark only, reads every entry from Pebble (the
	// driver before the entry cache), to measure beside the default.
	noEntryCache bool
	// ackAfterSync, benchmark only, completes proposals after the round's fsync as the
	// engine did before it acked early (BenchmarkProposePipelined's baseline).
	ackAfterSync bool
	// brokenApplyBeforeCommit, test only, applies (and acknowledges)
	// entries as soon as they are appended, before they commit: the
	// simulation must catch it.
	brokenApplyBeforeCommit bool
	// brokenNoSync, test only, never syncs its batches: messages and
	// acknowledgements then run ahead of durability.
	brokenNoSync bool
	// brokenSkipCatchup, test only, installs a snapshot without fetching
	// the records it needs: the simulation must catch the gap.
	brokenSkipCatchup bool
}

// Validate reports every problem of the configuration at once.
func (c *Config) Validate() error {
	var errs []error
	if c.NodeID == 0 {
		errs = append(errs, errors.New("NodeID must not be 0"))
	}
	if c.DB == nil {
		errs = append(errs, errors.New("DB is required"))
	}
	if c.StateMachine == nil {
		errs = append(errs, errors.New("StateMachine is required"))
	}
	if c.Transport == nil {
		errs = append(errs, errors.New("Transport is required"))
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"TickInterval", int64(c.TickInterval)}, {"ElectionTicks", int64(c.ElectionTicks)},
		{"HeartbeatTicks", int64(c.HeartbeatTicks)}, {"QuiesceAfterTicks", int64(c.QuiesceAfterTicks)},
		{"MaxInflightMsgs", int64(c.MaxInflightMsgs)}, {"InboxSize", int64(c.InboxSize)},
		{"SnapshotReportTicks", int64(c.SnapshotReportTicks)},
	} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative, got %d", f.name, f.v))
		}
	}
	d := c.withDefaults()
	if d.ElectionTicks <= d.HeartbeatTicks {
		errs = append(errs, fmt.Errorf("ElectionTicks (%d) must be greater than HeartbeatTicks (%d)", d.ElectionTicks, d.HeartbeatTicks))
	}
	if len(errs) > 0 {
		return fmt.Errorf("replica: config: %w", errors.Join(errs...))
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.TickInterval == 0 {
		c.TickInterval = 100 * time.Millisecond
	}
	if c.ElectionTicks == 0 {
		c.ElectionTicks = 10
	}
	if c.HeartbeatTicks == 0 {
		c.HeartbeatTicks = 1
	}
	if c.QuiesceAfterTicks == 0 {
		c.QuiesceAfterTicks = c.ElectionTicks
	}
	if c.MaxSizePerMsg == 0 {
		c.MaxSizePerMsg = 1 << 20
	}
	if c.MaxUncommittedBytes == 0 {
		c.MaxUncommittedBytes = 64 << 20
	}
	if c.MaxInflightMsgs == 0 {
		c.MaxInflightMsgs = 256
	}
	if c.InboxSize == 0 {
		c.InboxSize = 1024
	}
	if c.EntryCacheBytes == 0 {
		c.EntryCacheBytes = 16 << 20
	}
	if c.LogCompactEvery == 0 {
		c.LogCompactEvery = 64
	}
	if c.LogCompactBytes == 0 {
		c.LogCompactBytes = 4 << 20
	}
	if c.LogTailEntries == 0 {
		c.LogTailEntries = 10_000
	}
	if c.CatchupBytesPerSecond == 0 {
		c.CatchupBytesPerSecond = 64 << 20
	}
	if c.CatchupChunkBytes == 0 {
		c.CatchupChunkBytes = 256 << 10
	}
	if c.CatchupStreams <= 0 {
		c.CatchupStreams = 8
	}
	if c.SnapshotReportTicks == 0 {
		c.SnapshotReportTicks = 4 * c.ElectionTicks
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}
