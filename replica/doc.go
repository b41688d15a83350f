// Package replica owns the raft groups of one QuicMQ node: the raft storage
// of every group in the node's Pebble DB, one driver that runs all of them
// on etcd raft's RawNode, and a state machine that assigns a group's record
// offsets when committed entries are applied (invariant I9). It is the
// foundation of replicated topics; it is not yet wired into the node.
//
// # Key layout
//
// Two key spaces of their own in the Pebble DB shared with wal (which uses
// 'm', 'p', 'r' and 't'). Group IDs and indexes are big-endian so that byte
// order is numeric order and one group's keys are contiguous:
//
//	'R' | group u64 | 'e' | index u64 -> raft entry: term u64 | protobuf Entry
//	'R' | group u64 | 'h'             -> HardState (protobuf)
//	'R' | group u64 | 'c'             -> ConfState (protobuf), set at bootstrap, by snapshots and conf changes
//	'R' | group u64 | 's'             -> last snapshot applied (protobuf)
//	'R' | group u64 | 't'             -> index u64 | term u64 of the entry before the first one kept
//	'L' | group u64 | 'a'             -> applied index u64 | next offset u64 | last time i64
//	'L' | group u64 | 'o' | offset u64 -> record: raft index u64 | time i64 | payload
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
// A round takes the Ready of every group that has one and writes all their
// entries (truncating conflicting suffixes), HardStates and applied entries
// into one Pebble batch, synced when any group needs it (group commit).
// Only after that commit returns does the round send messages, one
// Transport.Send per peer with all of that peer's messages of the round,
// then Advance the groups and answer proposals. Applying in the same batch
// as the raft state keeps the applied index and the records it produced
// atomic; a batch lost in a crash (only unsynced ones can be) is re-applied
// from the raft log with the same result, since Apply is deterministic and
// entries carry their proposer's timestamp. A failed commit stops the
// driver for good (as in wal: the WAL's state is unknown).
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
// # Not built yet
//
//   - Wiring into the node: wal.Open owns its Pebble DB today; the node must
//     share it (wal exposing its DB, or both opened on one) so that a
//     replicated topic's records, dedup windows, mirror cursors and consumer
//     positions are written in the apply batch (I10). LogSM is the stand-in
//     for that: the integration replaces it by a StateMachine that appends
//     into wal's 'm' space in the same batch and serves reads up to the
//     applied index (I3, I9).
//   - A Transport over the peer QUIC links with stream priorities (votes and
//     heartbeats ahead of appends). Its wire form exists (codec.go): one
//     batch per Send, in which heartbeats and their responses are coalesced
//     to a few bytes each (group, term, commit), as CockroachDB coalesces
//     them per node pair; the simulation and tests pass every batch through
//     it.
//   - Membership changes (learners that catch up before they vote, I8),
//     log compaction and snapshots (Storage supports ApplySnapshot and
//     Compact; the driver refuses a received snapshot), metrics, an entry
//     cache (Entries reads Pebble by iterator), and quiescence with a dead
//     follower (a group with a follower behind never quiesces).
//   - Placement of replica sets (a metadata group per region).
package replica
