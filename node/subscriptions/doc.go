// Package subscriptions is a node's subscription side: a subscription's core (its cursors
// over the durable log, its reads, its acknowledgements), the stream it is written to, and
// exclusive durables. node/doc.go says where the session side of a subscription stays.
//
// Files, in reading order:
//
//   - subscription.go: Subscription (what other goroutines may touch) and subRun (the run
//     goroutine's state), New, Serve, the set-up (prepare) and the run loop (stream);
//     api.go: what the node's other goroutines may ask or tell a subscription;
//     host.go: Host, the node as subscriptions see it (HostConfig: the log, tails,
//     placement, links, where the region keeps a topic behind Region, metrics, the live
//     table); singlecopy.go: SingleCopy, the Region of single-copy topics (the replicated
//     one is node's, node/subhost.go).
//   - inbox.go: everything other goroutines tell the run goroutine, and its wake-up.
//   - read.go: a cursor's reads from the log or the shared tail, encoded into the read-ahead
//     and handed to the writer (I3, I5); topics.go: adding a topic as it appears, where its
//     cursor starts, CAUGHT_UP; sweep.go: a wildcard of this node's logs read as one sweep
//     (WildSet, wal.Sweep); park.go: a caught-up subscription parked on its connection's
//     fanout (node/tail), through tail.Member.
//   - acks.go: the ack reader (ACK, COMMIT, a durable's stored positions) and the lag;
//     commit.go: COMMITTED; vector.go: portable positions (node/vector) of a subscription.
//   - upstream.go: a subscription that spans the region, one upstream per other node.
//   - stream.go: Stream, how its frames reach the client (OwnStream: a QUIC stream of its
//     own, I4; the ablation's shared stream is node/sharedstream's); writer.go: Writer, the writer
//     goroutine and the hand-over of batches, so that a subscription holds at most two
//     batches whatever its lag (I5), and lets go of its log iterators while a write blocks.
//   - metrics.go: the per-stream series.
//   - exclusive.go, holder.go: exclusive durables, Locks (Here: one subscriber at a time at
//     the durable's home, standbys waiting their turn; At and ServeHold: the holder streams
//     of docs/protocol.md "Holder streams").
//
// What it owns: every subscription's state (cursors, read-ahead, upstreams, sweep,
// acknowledged positions not yet stored), the table of live subscriptions (Host.Live), the
// wildcard sweeps' registration (WildSet), the per-stream series, the held durables.
//
// What it must not touch: the node, its sessions and streams other than the subscription's
// own, consumer groups, publishing. It never imports node. What it needs of a session comes
// in Params (the connection as a tail.Conn, the principal, whether it is a peer, the
// authorized SUBSCRIBE, the Stream); what it needs of the node in HostConfig, built once at
// the end of node.New; who serves a topic and where a durable's positions go only through
// Region, whose implementation the node picks once (no code here asks which it has). The
// session side stays in node/subscribe.go: authorization and the tenant's namespace,
// limits, a durable's lock (node/durables.go), group members, pass-through replays, the
// ablation's shared stream (node/sharedstream), and tracking for a drain.
//
// Goroutines and what each owns:
//   - The run goroutine (Serve, on the session's stream goroutine): the subRun, reached by
//     no other goroutine, except a fanout while the subscription is parked on it (park
//     hands the cursor and the stream's writes over, unpark takes them back).
//   - The ack reader (ServeAcks on a goroutine the session starts; for the ablation, the
//     shared stream's reader through TakeAck and StoreAcks): the staged positions (pending)
//     and the acknowledged vectors.
//   - The writer goroutine (Writer), from a subscription's first batch to Writer.Close: the
//     batch it was handed.
//   - One reader goroutine per upstream, for its life: the upstream's reading side; it hands
//     each frame to the run goroutine over an unbuffered channel.
//   - Others write only to a subscription's inbox: the node's topic watcher
//     (NotifyNewTopic), the log's completer (WildSet.Advanced), the ack reader (COMMIT, its
//     protocol error), the node (End, Drain).
//   - Writers that remain on shared state, and why: Subscription.mu (what was delivered
//     per topic number, written by the run goroutine or the parked fanout, never both at
//     once; the durable's floor and an upstream's unsent ACK, written by the ack reader;
//     the lag collector reads it): an ACK is checked against what was delivered on the ack
//     reader, which must not wait for a run goroutine blocked on flow control. Host's live
//     table and the metrics' reference counts are small structs under their mutexes.
//   - Locks.Here runs on the subscribing session's stream goroutine (or a holder stream's,
//     through ServeHold), and blocks only while a standby waits. Locks.At starts one reader
//     per holder stream it opens, for the lock's life; Locks.ServeHold one per stream it
//     serves, and waits for it before it returns.
//
// Invariants: nothing past the durable high-watermark is read (I3: the log's Scanner and
// Sweep stop there, the tail holds nothing past it); a subscription holds its cursors and at
// most two batches whatever its lag (I5); a durable's position only moves forward and is
// stored synced before COMMITTED; a durable's records never go to two subscribers at once; a
// lock whose holder stream is lost ends the subscriptions that held it.
package subscriptions
