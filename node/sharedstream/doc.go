// Package sharedstream is the node's side of the shared-stream ablation: a measurement
// aid, off by default (node.Config.AblationSharedStream, --ablation-shared-stream), which
// the benchmark uses to measure one stream per subscription (I4) against one stream for all.
//
// QuicMQ's claim is that one QUIC stream per subscription keeps a lossy or slow subscription
// from stalling the others on the same connection. To measure that claim against the same
// node, client and transport, this mapping carries all of a connection's subscriptions on
// ONE stream, as a TCP broker carries them on one socket. It is a stream mapping (subscriptions.Stream)
// beneath the one subscription core and nothing more: each subscription on a shared stream
// is set up, authorized (authorizeSubscribe: tenant namespace and subscribe grants, the same
// errors), read from the log, batched, written by its own writer goroutine and acknowledged
// exactly as on a stream of its own. What changes is only where its frames go and how its
// topics are numbered, so that:
//   - a lost packet holds up the delivery of every later byte of the stream, whichever
//     subscription those bytes belong to (transport head-of-line blocking), and
//   - a subscription the application stops reading fills the stream's flow-control window
//     (the client stops reading the shared stream once that subscription's small queue is
//     full) and so stops every other subscription on it, as a full TCP socket would.
//
// Protocol (docs/protocol.md, appendix "Shared-stream ablation"): the client opens one stream
// whose first frame is a SUBSCRIBE with region "~shared-stream" (never a region name: regions
// match [A-Za-z0-9_-]). Further SUBSCRIBE frames on the same stream (region empty or the
// same marker) add subscriptions, numbered 0, 1, 2, ... in the order sent; each is answered
// by SUBSCRIBED in that order. TOPIC, RECORD, RECORDS, GAP and ACK use the index
// subscription<<32 | topic, so the client routes frames by index>>32; CAUGHT_UP, which has no
// index, is never sent on a shared stream.
// Subscriptions on the stream end together when the stream ends; an ERROR for any of them
// (a refused SUBSCRIBE included) ends the stream. Region replays are not carried.

// What it owns: a shared stream's reader (its SUBSCRIBE and ACK frames), the numbering of
// its subscriptions, the lock that keeps their batches whole, and the stream's end.
//
// What it must not touch: the subscriptions' own state (it reaches them only through
// subscriptions.Subscription's methods: TakeAck, StoreAcks, SetUp), authorization, limits,
// metrics and the session's tracking for a drain, which come in through Session
// (node/ablation.go implements it over a session).
//
// Goroutines and what each owns: the session's stream goroutine calls Stream.Serve and is
// the stream's reader, and so the ack reader of every subscription on it (Stream.subs is
// its alone); each subscription has its run and writer goroutines, as on a stream of its
// own (Serve starts the run goroutines and waits for them); Stream.wmu serialises their
// writes and guards ended. Drain may come from any goroutine.
package sharedstream
