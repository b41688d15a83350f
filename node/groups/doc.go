// Package groups is a node's live shared consumer groups (docs/architecture.md, "Consumers";
// docs/protocol.md, "Consumer groups"). Members of a group split the records of its pattern: each record is handed to
// one member at a time, acknowledged per record, handed out again when its ack-wait passes,
// when the member gives it back (NAK) or when the member's stream ends, and written to the
// group's dead-letter topic once it was delivered MaxDeliver times.
//
// A live group (one with a member on this node) is a Group; its state is owned by it,
// reached only through its methods (below, "Who writes a group's state"): a member
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
// replicated state (Replicated, where.go, through Env.Where): each store is a raft entry of the topic's group.
//
// A group is served by its home (node/grouprelay.go), from that node's log: in a region of
// several nodes, the owner (replicated: the leader) of a literal pattern's topic, else the
// rendezvous winner of its name; members connected to another node are relayed there, their
// frames passed by a Relay (relay.go), which holds no group state. A
// pattern is served from the topics its home holds.
//
// What this package owns: a group's state in memory (its topics, the records outstanding and
// to whom, the ordered keys' holders), handing records out, acknowledgements, ack-waits,
// dead-lettering and the state it stores; and resuming from a state mirrored from another
// region (vector.go); a member's stream (stream.go: Stream, its run loop, which takes
// records and writes them, and its ack reader, which takes ACK, NAK and COMMIT), driving
// its Member through Take, AckAt, NakAt and Store; the group binds a member's stream
// indexes as it hands records out, so that over many topics neither keeps a map by name;
// where a group's state and dead letters go (Where, where.go: SingleCopy, the node's log, or
// Replicated, its split between the log and the topics' raft groups, barriers and moves);
// a relayed member's frames (Relay, relay.go). What it must not touch: sessions (the node sets a member up, node/member.go: its
// settings, its home, relaying it there, tracking it for a drain), the table of live
// groups and who may join one (node/groups.go), which Where the node has (chosen once in
// node.New), and the raft groups themselves: proposals, leaders, appends (Raft, which the
// node implements in node/grouprepl.go).
//
// Who writes a group's state: the Group alone. Its fields, its topics' (gtopic), its
// flights' and its members' (Member) are unexported, none embedded, and only the Group's
// methods reach them (TestStateHasNoWayInButMethods); a Member is made by NewStream and
// handed to its group by the node (Stream.Member). The goroutines that call those methods,
// each for a short step that waits on no peer (a dispatch by key, or after a resume from
// another region's vector, reads the log's records under the mutex; stores, dead letters and
// the members' reads of records run outside it):
//   - a member's run goroutine (the session's stream goroutine, Stream.run): Join and Leave
//     (node.joinGroup, node.leaveGroup), Take (dispatch, ack-wait expiry, claiming dead
//     letters), Learned, Ack (a record retention deleted first), DeadLetter, Store, Poke
//     and RefreshTopics (when wake or newTopics fires);
//   - a member's ack reader (Stream.readAcks): AckAt, NakAt, Store;
//   - management requests (node/manage/here_groups.go and here_topics.go, on the request's goroutine): DropTopic
//     and Purged after a delete or purge of a topic (local, or committed through raft:
//     called once the proposal returns, not from raft's apply), EndMembers; and reads
//     (LiveState, MemberCount, Follows, Stats);
//   - the log's completer (on a replica, raft's apply): noteAdvance, which writes only
//     g.notes under its own mutex, and the wal.Notify channels (wake, newTopics), which a
//     run goroutine turns into Poke and RefreshTopics.
//
// Not writers: the group relay (it passes frames between a client and the home's member
// stream, whose goroutines do the writing), the replicated group code and raft's apply
// (Env's functions write raft entries or the log, called by Store, DeadLetter and the run
// loop without g.mu; they read the group's settings, fixed by New).
//
// Three locks, in this order: storeMu (one store at a time: a later state is never
// overwritten by an earlier one; it owns the stores' vector trackers, gtopic.track and
// vecs), mu (everything else: topics, flights, members, ordered keys, what to store), and
// notes (what the completer noted, taken under mu by Take). Why a mutex and not a loop of
// the group's own: every Take and every run of ACKs would be a round trip to that goroutine
// (two goroutine switches), on the path that hands out and acknowledges each record, while
// the steps under the mutex are short and wait on nothing; what a loop would give (one
// writer) the unexported state gives as well, since no code outside these methods can reach
// it.
//
// Goroutines: a Group has none. A Stream has a run goroutine (Serve's caller, the
// session's stream goroutine), the only writer of the stream, owning its writer, its sweep
// and its reused buffers; and an ack reader, which Serve starts and waits for, handing
// COMMIT to the run goroutine through commitAsked and commitWake.
package groups
