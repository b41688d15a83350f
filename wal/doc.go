// Package wal owns the durable topic logs of one QuicMQ node: one log per
// topic with dense offsets 0,1,2,..., all stored in one Pebble DB.
//
// Why it exists: every record is fsynced before its publish is acknowledged
// (invariant I2), nothing past the durable high-watermark is ever served
// (I3), and a mirrored batch and its cursor are stored atomically (I7). The
// package hides the Pebble key layout, group commit, the high-watermark,
// retention and recovery behind Append, Read and Position, and the storage
// side of topic and consumer management (topics_admin.go, consumers.go).
//
// # Key layout
//
// Topic names map to uint32 IDs so that names cannot prefix-collide and
// record keys sort numerically:
//
//	't' | topic name               -> topic ID (written in the batch of the topic's first records, or by CreateTopic)
//	'i'                            -> the topic ID counter: every ID below it was handed out once (same batch)
//	'm' | topicID u32 BE | off u64 BE -> record value (see record.go)
//	'r' | topicID u32 BE            -> retention state: first retained offset and its byte position (retention, purge)
//	'c' | topicID u32 BE            -> topic configuration: the topic's own retention (absent: Options.Retention)
//	'p' | uvarint len | topic | name -> named position (consumer position, mirror cursor): value, update time, flags[, vector]
//	'g' | topic name               -> raft group of a replicated topic (see "Replicated topics")
//	's' | uvarint len | group ...  -> a shared consumer group's settings and state (see "Consumer groups")
//
// KeyPrefixes lists these first bytes; package replica keeps its keys ('R',
// 'L') in the same DB and checks they cannot collide.
//
// Every value is versioned and carries a CRC32-C over its key and value; a
// mismatch is ErrCorrupt naming the topic and offset, and is never served.
// Positions have three layouts (v1: the value only; v2: with the time of the
// write and a reset flag; v3: v2 with a vector, per origin region the last
// origin offset the position covers, position.go); all are read, v3 is
// written for a position given a vector, v2 otherwise.
//
// Topic IDs are never handed out twice (the counter is stored in the batch
// that creates a topic), so a topic created after a delete of the same name
// has a new ID and starts at offset 0; a delete removes every key of the old
// ID and every position of the name in its one synced batch.
// Each record stores its byte position (cumulative stored bytes of its topic
// before it), so the stored size of any offset range, and retention by
// bytes, cost two point reads instead of a scan.
//
// # Group commit and the high-watermark
//
// Goroutines: Open starts three, all stopped and waited for by Close.
//
//   - The committer owns offset assignment. It takes everything queued by
//     Append/AppendAsync, builds one Pebble batch (bounded by
//     Options.MaxBatchRecords/MaxBatchBytes), and hands it to Pebble with
//     ApplyNoSyncWait(pebble.Sync). It does not wait for the fsync: several
//     batches are in flight at once, and Pebble merges their syncs into one
//     fsync. Because a single goroutine enters batches into Pebble's commit
//     pipeline, the order of batches in Pebble's WAL is the order of offsets,
//     so a crash can lose a suffix of the log but never leave a hole.
//     (Pebble marks ApplyNoSyncWait experimental; CockroachDB uses it for
//     the same reason. Several goroutines calling Commit(pebble.Sync) would
//     give the same fsync sharing but no control over the WAL order.)
//     It also owns the topic table: creating a topic, changing its
//     configuration, purging or deleting it, writing positions in bulk
//     (reset, delete) and applying a retention cut are requests in the same
//     queue, each committed alone (topics_admin.go), so they are ordered with
//     the appends around them. A purge or delete first drains the pipeline
//     (waits until every batch applied before it is durable and published),
//     so it never races a batch in flight; a retention pass computes its cut
//     on its own goroutine and has the committer apply it, so a first offset
//     never moves back. The log holds one map of its topics, the readers'
//     (durable ones, Log.mu): the committer finds a topic there or among the
//     topics it created whose batch is not durable yet (Log.repl.local), in
//     that order, since a topic leaves the second only after it entered the
//     first (committerTopic). Replicated topics are in the same map, told apart
//     by their raft group (topic.group, 0 for a local topic); a ReplicaWriter's
//     topics bound but not published yet wait in Log.repl.staged likewise.
//   - The completer takes applied batches in the same order, waits for each
//     batch's sync, then advances the topics' high-watermarks, publishes
//     positions, wakes Notify watchers and calls the done callbacks. Since it
//     completes strictly in order, a high-watermark never passes a batch that
//     is not yet durable, even when a later batch's fsync returned first.
//   - The retention loop runs EnforceRetention every
//     Options.RetentionInterval.
//
// Pebble makes a batch visible to its readers as soon as it is applied, before
// the fsync; Read, OffsetForTime and Bounds are therefore bounded by the
// high-watermark, never by what Pebble shows. For the same reason a cut
// (retention, purge) moves the first offset readers see, and a delete removes
// the topic from what readers see, before its batch is applied: a reader then
// gets an *OffsetOutOfRangeError or a *TopicDeletedError, never a missing or
// half-deleted record.
//
// # Many topics
//
// A reader of many topics (a node's wildcard subscription) registers no watcher per topic:
// OnAdvance calls one function for every advance of any high-watermark, under the same lock
// as the advance, and TopicsWhile registers the reader under it and then lists the topics,
// a chunk per hold of the lock (appends go on between chunks): the reader learns of every
// advance after its registration, and the first one's high-watermark before it is the
// topic's as of the registration, which the listing may already have passed. A Sweep
// reads many topics with one iterator over the 'm' keys, in key order (topic ID, offset),
// each read bounded by its topic's high-watermark (sweep.go).
//
// # Consumers
//
// Named positions live in memory (every durable one, loaded at Open, by name
// and then by topic: positionSet) and in Pebble. Positions selects by name from memory, looking
// only at the names selected (a listing of consumers costs nothing per mirror
// cursor); with no name filter it walks a Pebble iterator and takes each
// durable value from memory, so its memory does not grow with their number.
// DeletePosition and PositionNames cost a pass over the name's positions and
// over the names; Pending one over the topics asked about. ResolveStart and ResetPositions
// are what a reset needs; Pending is the backlog (high-watermark less the
// resume offset, per topic).
//
// # Idempotent publish
//
// A record with a ProducerID and a Sequence > 0, published in this region, is
// stored at most once per (topic, ProducerID, Sequence): the committer checks
// it against a bounded window of that producer's last sequences before it
// assigns an offset, and reports a repeat in AppendResult.Skipped with the
// original offset and time instead of appending it (dedup.go). The windows
// live in memory only and are rebuilt from each topic's tail after Open.
//
// # Replicated topics
//
// A topic replicated by a raft group (package replica) is written not by
// Append but by the one goroutine that applies the group's committed
// entries, through a ReplicaWriter, into the raft driver's batch on the
// Log's own Pebble DB (DB; replica keeps to key bytes outside KeyPrefixes).
// Its records, positions and topic ID use the layout above, and a marker
// 'g' | topic name -> group u64 says it is replicated; from Open on, Append,
// SetPosition and the topic and position operations (create, configure,
// purge, delete, reset, delete position) refuse it with a *ReplicatedError,
// and retention skips it (a cut must be the group's decision, not each
// replica's): the group's entries cut it (Cut: the records below an offset
// deleted and the first offset stored in one batch), configure it
// (SetTopicConfig) and delete it (Forget), through the writer (replretain.go). The writer
// advances the high-watermark and wakes watchers only once the driver has
// committed the batch (Published), as the completer does for appends (I3);
// it assigns no times of its own: the state machine passes times clamped
// so that every replica stores the same (replicated.go). The node does not
// use it yet: publishes, mirror appends and durable positions of a
// replicated topic must then go through its group, reads stay as they are.
//
// # Failure
//
// A failed synced commit leaves the WAL in an unknown state (a later fsync
// may succeed without the failed data having reached the disk). The log then
// fails that batch and every later one, and refuses all further appends with
// ErrFailed: offsets are never reused and no hole is ever created. Reads of
// what was durable keep working. Reopening the log (after fixing the disk)
// recovers whatever Pebble recovered, which is always a dense prefix.
// Pebble itself treats a WAL write after a failed WAL sync as fatal (it
// panics), so a batch the committer applied before it learned of the failure
// can still end the process: fail-stop, never a hole.
//
// # Consumer groups
//
// A shared consumer group's state (groups.go) has keys of its own:
//
//	's' | uvarint len(group) | group          -> settings: pattern, ack-wait, max-deliver, dead-letter topic, order
//	                                             [, start kind (byte), start time (uvarint unix ns)]
//	's' | uvarint len(group) | group | topic  -> state: floor, next, then per outstanding record
//	                                             (offset - floor, deliveries << 1), then the time
//	                                             of the store (unix ns), then the layout (1, or 2
//	                                             followed by the vector: groupvector.go), all
//	                                             uvarints
//
// A group stored with a start (GroupStart: the first record, or a time, which for "latest"
// is a ClockMark, clockmark.go) has a state only of the topics it handed records out of: on
// any other topic it is at StartOf(topic, start). A group stored without one (before the
// start was kept; a replicated topic's entry carries none) has a state of every topic it
// follows. An earlier build refuses settings with a start as malformed.
// An offset of [floor, next) without an entry is done. Layout 2 adds the state's portable form
// (a GroupVector: per origin region the last origin offset handed out, each entry's origin and
// origin offset, the outstanding records not at an offset before next); a state without a vector
// is still written as layout 1. A state of a group mirrored from another region is stored as
// "mirror/REGION/group/NAME" (SetMirroredGroup, which keeps its origin's time and never replaces
// a newer one) with only its vector. A state stored before the layout
// number was kept listed every offset of [floor, next) with a done bit (an offset it did
// not list was outstanding); it reads back in the sparse form. One stored before the time
// was kept ends after its entries and reads back with a zero time. Values are framed like
// the other metadata values (CRC32-C over key and value, version). SetGroup writes
// settings and any number of topics' states in one synced Pebble batch, outside the
// committer (a group's state orders with nothing else in the log); Group reads them back
// from Pebble. The node's group dispatcher owns a live group's state and is the only
// writer of its keys. A group's outstanding bound (node.GroupConfig.Window) bounds each
// state's size. Groups lists them and DeleteGroup removes one (groups_admin.go). A
// topic's purge moves every group's floor on it to the topic's next offset, and its
// delete removes every group's state of it, in the operation's one synced batch; both
// find those states with one pass over the 's' keys. The state of a replicated topic is
// replicated state (I10): replica's state machine writes it at apply, in the raft entry's
// batch (ReplicaWriter.SetGroup and RemoveGroup, groups_replicated.go), and the node's
// dispatcher stores it through raft, not with SetGroup.
package wal
