// Package replica owns the raft groups of one QuicMQ node: the raft storage
// of every group in the node's Pebble DB, one driver that runs all of them
// on etcd raft's RawNode, and a state machine that assigns a group's record
// offsets when committed entries are applied (invariant I9), either in a
// log of its own (LogSM) or as a topic of wal (WalSM). It is the engine of
// replicated topics: a node started with Replicas > 1 runs one Driver
// (node/replicated.go), with the region's metadata group on a LogSM and one
// group per topic on a WalSM, over federation's Transport.
//
// # Key layout
//
// Two key spaces of their own in the Pebble DB shared with wal (whose
// first bytes are wal.KeyPrefixes; NewWalSM refuses to start should they
// meet). Group IDs and indexes are big-endian so that byte order is numeric
// order and one group's keys are contiguous:
//
//	'R' | group u64 | 'e' | index u64 -> raft entry: term u64 | protobuf Entry
//	'R' | group u64 | 'h'             -> HardState (protobuf)
//	'R' | group u64 | 'c'             -> ConfState (protobuf), set by snapshots and applied conf changes
//	'R' | group u64 | 's'             -> last snapshot applied (protobuf)
//	'R' | group u64 | 't'             -> index u64 | term u64 of the entry before the first one kept
//	'L' | group u64 | 'a'             -> applied index u64 | next offset u64 | last time i64
//	'L' | group u64 | 'o' | offset u64 -> record: raft index u64 | time i64 | payload
//	'L' | group u64 | 'w'             -> WalSM: applied index u64 | records with a producer applied u64
//	'L' | group u64 | 'T' | topic     -> WalSM: next offset u64 | last time i64 [| log start u64, once cut] of a topic of the group
//	'L' | group u64 | 'd' | n u64     -> WalSM: the de-duplication window's n-th record with a producer:
//	                                     topic | producer | sequence | offset | time
//
// Every value is framed as version u8 | crc32c(key, payload) u32 | payload; a
// mismatch is reported as corruption, never served.
//
// # Goroutines and ownership
//
// Driver.Run is the one goroutine that owns every group's RawNode, its
// Storage writes, the state machine's staged state and the pending
// proposals; there is no goroutine or timer per group. Other goroutines reach
// it through Deliver (inbound messages, dropped when the inbox is full) and
// through Propose, AddGroup, Campaign, Status and Stats, which run a
// function on it. The core (engine) has no goroutines, timers or clocks: Run
// calls it from a ticker and channels, and the simulation (sim_test.go) calls
// the same functions directly on a virtual clock.
//
// A round looks only at the groups touched since the last one (a message, a
// proposal, a tick, a campaign or a report for them, or a Ready in the last
// round: engine.touch), so that a round costs what changed however many groups
// are quiet; it takes the Ready of every one that has one and writes all their
// entries (truncating conflicting suffixes), HardStates and applied entries
// into one Pebble batch, synced when any group needs it (group commit).
// Only after that commit returns does the round send messages, one
// Transport.Send per peer with all of that peer's messages of the round,
// then Advance the groups and answer proposals; a leader's appends are the
// exception: they leave before the commit (when the round changes no term
// or vote), so that the leader's fsync and its followers' overlap, while
// the leader counts itself toward the quorum only after Advance. Applying in the same batch
// as the raft state keeps the applied index and the records it produced
// atomic; a batch lost in a crash (only unsynced ones can be) is re-applied
// from the raft log with the same result, since Apply is deterministic and
// entries carry their proposer's timestamp. A failed commit stops the
// driver for good (as in wal: the WAL's state is unknown).
//
// Propose and ProposeAsync queue a proposal without waiting for Run: Run
// takes the whole queue at the start of each round, so every proposal made
// while it waited on a sync shares the next one (with 32 entries in flight
// a leader's fsync carries about 30 of them instead of one). Each group's
// Storage keeps its newest durable entries in memory
// (Config.EntryCacheBytes), from which a leader reads its entries back when
// they commit and when it sends them, instead of reading Pebble; a group
// going quiet drops its cache, and a node whose groups are all quiet drops
// its rounds' batch too, so an idle node holds neither.
//
// Proposals are framed (node, sequence, time, payload) and answered when
// their entry is applied here, with the offset and time it was given; a
// follower answers at once with a *NotLeaderError naming the leader. A
// proposal whose term has been passed by an applied entry of a later term is
// answered with ErrDropped: it can no longer commit.
//
// All groups tick on the one ticker, so a round's heartbeats of every group
// for one peer leave together, in one Send. Groups run with PreVote and
// CheckQuorum. An idle group (no pending
// proposal, every follower's match at the leader's last index, everything
// committed and applied, for Config.QuiesceAfterTicks ticks) quiesces: the
// leader sends one last heartbeat marked Quiesce carrying the commit index,
// and neither side ticks it again until a proposal or a message other than
// a heartbeat response wakes it. A quiet follower does not notice its
// leader's death by itself: a proposal to it (refused, but waking it), any
// message, or Driver.WakeLedBy from the node's failure detector wakes it.
//
// # Replicated topics on wal
//
// WalSM is the state machine of replicated topics. The driver runs on the
// wal.Log's own Pebble DB (Log.DB), and a proposal is a WalEntry (entry.go:
// versioned, CRC'd, fuzzed decoder): an append, a mirror append (origin
// region, expected cursor, new cursor, records: applied as a no-op with a
// *CursorMismatchError when the stored cursor is another, so a stale link
// never writes twice), a set position or a set group (a consumer group's
// settings and state of one topic, or its removal, under wal's group keys;
// one that stores nothing is a barrier). Applying writes, in the round's
// batch, the records at dense offsets in wal's key layout and encoding
// (through wal.ReplicaWriter), the de-duplication window, cursors,
// positions and the applied index (I9, I10); after the batch is committed
// the topics' high-watermarks advance and Notify watchers wake, so wal's
// Read, Scanner, Notify, OffsetForTime and retention serve replicated
// topics unchanged and never past the applied index (I3). Times are the
// proposer's clock, clamped never to decrease; de-duplication looks only at
// the last DedupWindow records with a producer that the group applied,
// stored in the group's state, so every replica and every restart answers
// a retried publish alike (a retry after a leader change gets its original
// offset). A topic maps to a group by WalSMConfig.GroupOf (one group per
// topic by default; a node's groups hold many topics, placed by its region's
// metadata, and GroupOf answers 0 for a topic whose placement it has not read:
// its entries apply in the group they come in); wal refuses local appends and
// positions to it. A
// follower's apply batch may be unsynced: a crash can lose it, and it is
// applied again, identically, from the synced raft log.
//
// # Log compaction, snapshots and catch-up
//
// With Config.LogCompaction (the node turns it on) a group's leader proposes,
// every LogCompactEvery applied entries or LogCompactBytes of them, whichever comes
// first (so that a busy group's raft log dies in Pebble's memtable), an entry of the
// driver's own (no offset) that every replica applies by discarding its log
// up to the index every replica had stored, in the apply batch; a follower behind keeps at
// most LogTailEntries applied entries for it. A replica further behind is
// sent a snapshot (Storage.Snapshot builds it at the state machine's applied
// index when raft asks) whose data is metadata only: the Snapshotter's state
// of the group other than its records (snapshot.go, walsm_snap.go: for WalSM
// every key of the group's 'L' space and every wal metadata key of its
// topics, whatever their layout). The receiving engine intercepts the MsgSnap
// (catchup.go): if its logs lack records up to the snapshot's next offsets
// it starts one catch-up for the group and drops the message; Run starts a
// goroutine that fetches the records through Config.Fetcher, paced, from any
// replica that applied them (the group's other voters first, the snapshot's
// sender last: catchup.go), and hands each chunk back to Run, which writes it unsynced and
// unserved at the same offsets (ImportChunk). When the fetch ends the engine
// steps the latest MsgSnap; the round installs it (Storage.stageSnapshot,
// Snapshotter.Restore) in its synced batch, which makes the records durable
// and served. A leader reports a snapshot to raft when the follower answers
// or after SnapshotReportTicks. Records left past the applied state by a
// catch-up that did not finish are the group's committed records; WalSM
// discards them before applying anything over them (settle), LogSM
// overwrites them.
//
// # Membership
//
// A group is bootstrapped through RawNode.Bootstrap, so its log carries its
// configuration from index 1, and a member joining empty (JoinGroup) rebuilds
// it, through a snapshot once the log was compacted. A replica moves by
// MoveStep (a node leaving, or removed as dead) and ReplaceStep (a replica
// restarted empty under a new ID), membership.go: the new one joins as a
// learner and, once caught up, one joint change makes it a voter and removes the
// old one, so a group never has fewer voters than before (I8). The node's
// metadata records drive the moves (node/move.go, node/balance.go).
//
// # Not built yet
//
//   - Quiescence with a dead follower (a group with a follower behind never
//     quiesces).
//   - Records stored once: a committed entry's records are written to the raft
//     log and again, at apply, in wal's keys.
package replica
