// Package tail is what many subscriptions of one topic on a node share: the topic's shared
// tail (tail.go), its last appended records read from the log once per append batch for
// every subscription caught up on it, and the fanout writer (fanout.go), which writes the
// topic's new records to every caught-up subscription of one client connection.
//
// What it owns: the tails by topic (Set, Topic: the ring of records, the wake-up channels
// of the subscriptions reading the topic, grouped by connection) and the fanouts
// (Fanout: its parked members, their handed-back frames, its encodings of a round). Its
// counters (Stats) are exported on the node's registry (Register).
//
// What it must not touch: the log beyond reading it (wal.Log's Bounds, ReadFunc,
// NotifyFunc, Instance), a subscription's state (a parked subscription is a Member: its
// cursor and its stream's writes, reached only through Member's methods between Park and
// Unpark), the connection beyond asking what it has sent (Conn). It never imports node:
// the node passes what it needs as a Config, a Conn (its session) and a Member (a
// subscription's run state).
//
// Goroutines:
//   - The log's completer calls a tail's wake on every advance of its topic; it never blocks.
//   - One goroutine per fanout (Fanout.run), from the first Park of a connection's
//     subscription on the topic to the last Unpark: it owns the fanout's rounds (its
//     encodings, its estimate of the connection's unsent bytes), and while a subscription is
//     parked, its cursor and its stream's writes.
//   - Everything else runs on the callers' goroutines: Acquire, Release and Watch on a
//     subscription's run goroutine when it adds or ends a cursor, Read on it and on a
//     fanout's (the first reader behind the log fills the tail for all, under the tail's
//     lock), Park and Unpark on the run goroutine while it is idle.
//
// Invariants: the tail is filled by wal.Log.ReadFunc, which returns nothing past the durable
// high-watermark (I3); a fanout never blocks on a stream, and hands a slow subscription back
// to its own writer (I4, I5).
package tail
