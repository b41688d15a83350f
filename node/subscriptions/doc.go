// Package subscriptions is the subscription side of a node cut out of package node, one
// part at a time (node/doc.go says which parts are still there). Today it holds:
//
//   - a subscription's stream: its mapping (stream.go: Stream, how its frames reach the
//     client and how its topics are numbered there; OwnStream, a QUIC stream of its own, I4)
//     and its writer (writer.go: Writer, the writer goroutine and the hand-over of batches
//     to it, so that a subscription holds at most two batches whatever its lag, I5, and lets
//     go of its log iterators while a slow write blocks);
//   - exclusive durables: the table of durable consumers held on this node, their home
//     (exclusive.go: Locks.Here, one subscriber at a time, standbys waiting their turn), and
//     the holder streams (holder.go, docs/protocol.md "Holder streams"): Locks.At takes a
//     lock at another home of the region for a client of this node, Locks.ServeHold keeps
//     one here for another node's client until its stream ends.
//
// What it owns: a subscription's writer goroutine and the batch handed to it (Writer, whose
// methods only the subscription's run goroutine calls); the held durables (Locks, one mutex
// inside the type: who holds which name, from which node and client, since when) and the
// holder streams it opens or serves.
//
// What it must not touch: the node, its sessions and a subscription's state (cursors, reads,
// acks: node/subscribe.go). It never imports node. A Writer is handed bytes, the
// subscription's Stream and a function that releases its log iterators. The locks' needs
// come as a LockConfig (the node's name and region, the management timeout, how to open a
// stream to a node of the region, the node's stop) and as arguments (the session's context,
// the client's address, the function that ends the subscriptions whose lock was lost, the
// function that fails a stream). Which node is a durable's home (node/grouprelay.go),
// whether a group already has the name, and who may send HOLD stay with the node
// (node/durables.go).
//
// Goroutines:
//   - One writer goroutine per subscription (writeBatches), from its first batch to
//     Writer.Close: it writes the batch it was handed to the Stream, counts the time the
//     write was blocked on flow control, and hands the buffer back. Flush, HandOver, Wait
//     and Close run on the subscription's run goroutine.
//   - Locks.Here runs on the subscribing session's stream goroutine (or a holder stream's,
//     through ServeHold), and blocks only while a standby waits.
//   - Locks.At starts one reader per holder stream it opens, for the lock's life: it reads
//     HELD or the refusal, then waits for the stream's end, and runs lost if the stream ends
//     before release. release waits for it.
//   - Locks.ServeHold starts one reader per holder stream it serves, which notices the
//     asker's FIN or reset; ServeHold waits for it before it returns.
//
// Invariants: a durable's records never go to two subscribers at once; a lock whose holder
// stream is lost ends the subscriptions that held it (lost), so none goes on without it.
package subscriptions
