// Package groups is a node's live shared consumer groups (docs/architecture.md, "Consumers";
// docs/protocol.md, "Consumer groups"). Members of a group split the records of its pattern: each record is handed to
// one member at a time, acknowledged per record, handed out again when its ack-wait passes,
// when the member gives it back (NAK) or when the member's stream ends, and written to the
// group's dead-letter topic once it was delivered MaxDeliver times.
//
// A live group (one with a member on this node) is a Group; its state is owned by its
// mutex, reached only through its methods, and every member's goroutines take it for short, non-blocking steps: a member
// takes records when it has room on its stream (so QUIC flow control on each member stream
// is the only backpressure: a member that stops reading takes nothing more, and the others
// go on), its ack reader marks records done. Nothing is read from the log for a member that
// did not ask, so no queue grows on the node; what a group holds is bounded by its window
// (Config.Window): at most Window outstanding records (handed out and not done, or
// given back and waiting to be handed out again) over all its topics. Per topic it keeps
// its floor, the next offset it hands out and the outstanding records between them; every
// other offset between them is done, so however far a member that stopped reading holds
// the floor back, the others go on while the group has fewer than Window outstanding.
//
// State in wal (wal/groups.go): the settings, and per topic the floor, the next offset and
// the outstanding records with their delivery counts, stored in one synced batch after
// each run of ACKs (and at a COMMIT), so that a node restart redelivers nothing
// acknowledged. The settings hold the group's start (earliest, a time, or for "latest" a
// wal.ClockMark taken when the group was made); a topic of the node's own log is stored
// only once the group hands out a record of it, and until then it is at that start
// (wal.Log.StartOf), the same after a restart, so a group over a wildcard of many topics
// stores what it read, not what it follows. A start at an offset is not stored (it is
// clamped to each topic's head when followed), nor does a replicated topic's raft entry
// carry one: such topics get a state when followed, as before. Delivery counts since the last store can be lost by a crash (a record may
// then be delivered more than MaxDeliver times in all). On a replicated topic the state is
// replicated state (node/grouprepl.go, through Env.Store): each store is a raft entry of the topic's group.
//
// A group is served by its home (node/grouprelay.go), from that node's log: in a region of
// several nodes, the owner (replicated: the leader) of a literal pattern's topic, else the
// rendezvous winner of its name; members connected to another node are relayed there. A
// pattern is served from the topics its home holds.
//
// What this package owns: a group's state in memory (its topics, the records outstanding and
// to whom, the ordered keys' holders), handing records out, acknowledgements, ack-waits,
// dead-lettering and the state it stores; and resuming from a state mirrored from another
// region (vector.go); a member's stream (stream.go: Stream, its run loop, which takes
// records and writes them, and its ack reader, which takes ACK, NAK and COMMIT), driving
// its Member through Take, AckAt, NakAt and Store; the group binds a member's stream
// indexes as it hands records out, so that over many topics neither keeps a map by name.
// What it must not touch: sessions (the node sets a member up, node/member.go: its
// settings, its home, relaying it there, tracking it for a drain), the table of live
// groups and who may join one (node/groups.go), and where state and dead letters are
// written and whether a member's group moved (Env's functions: the node's log, or the
// topic's raft group).
//
// Goroutines: a Group has none; its mutex owns its state. A Stream has a run goroutine
// (Serve's caller, the session's stream goroutine), the only writer of the stream, owning
// its writer, its sweep and its reused buffers; and an ack reader, which Serve starts and
// waits for, handing COMMIT to the run goroutine through commitAsked and commitWake.
package groups
