// Package subscriptions is the subscription side of a node cut out of package node, one
// part at a time (node/doc.go says which parts are still there). Today it holds the
// exclusive durables: the table of durable consumers held on this node, their home
// (exclusive.go: Locks.Here, one subscriber at a time, standbys waiting their turn), and the
// holder streams (holder.go, docs/protocol.md "Holder streams"): Locks.At takes a lock at
// another home of the region for a client of this node, Locks.ServeHold keeps one here for
// another node's client until its stream ends.
//
// What it owns: the held durables (Locks, one mutex inside the type: who holds which name,
// from which node and client, since when) and the holder streams it opens or serves.
//
// What it must not touch: the node, its sessions and its subscriptions. It never imports
// node: what it needs comes as a LockConfig (the node's name and region, the management
// timeout, how to open a stream to a node of the region, the node's stop) and as
// arguments (the session's context, the client's address, the function that ends the
// subscriptions whose lock was lost, the function that fails a stream). Which node is a
// durable's home (node/grouprelay.go), whether a group already has the name, and the checks
// of who may send HOLD stay with the node (node/durables.go).
//
// Goroutines:
//   - Here runs on the subscribing session's goroutine (or a holder stream's, through
//     ServeHold), and blocks only while a standby waits.
//   - At starts one reader per holder stream it opens, for the lock's life: it reads HELD
//     or the refusal, then waits for the stream's end, and runs lost if the stream ends
//     before release. release waits for it.
//   - ServeHold starts one reader per holder stream it serves, which notices the asker's FIN
//     or reset; ServeHold waits for it before it returns.
//
// Invariant: a durable's records never go to two subscribers at once; a lock whose holder
// stream is lost ends the subscriptions that held it (lost), so none goes on without it.
package subscriptions
