// Package federation owns the node-to-node links between regions: dialing peers over QUIC
// (ALPN quicmq-peer/1, mutual TLS, keep-alives), one catalog stream per link announcing the
// peer's topics that match local interest, one mirror stream per mirrored topic, the mirror
// cursors that make cross-region mirroring exactly-once (I7), connection migration of the
// dialing side, and the per-link and per-mirror metrics. Between the nodes of one region it
// also carries raft messages (raft.go: Send, Config.Raft), on a control and a bulk stream per
// link, each with its bounded queue and writer goroutine; the node does not use it yet.
//
// Mirroring, from region A's side: A's node dials a node of region R and sends WATCH with the
// patterns A is interested in (local subscriptions plus the configured mirror list). R announces
// each matching topic T, with its head, and reports the head again whenever it moves. While
// T's head is past what A has mirrored, A holds a MIRROR stream asking for the records of T
// that originated in R, from the origin offset after its stored cursor (T, R); a caught-up
// mirror gives its stream back, and at most Config.MaxMirrorStreams are open per link, the
// topics beyond waiting in turn (park.go). R serves them from its
// own log, skipping records that originated elsewhere (so a full mesh has no loops). A appends
// each batch to its own log of T together with the new cursor in one synced Pebble batch, so a
// crash or link loss can neither lose nor duplicate a record: A resumes from the cursor.
// How mirrors map onto QUIC streams is one pluggable piece (streamMapping, mapping.go): a
// stream per mirrored topic, or the shared-link ablation's one stream per link
// (ablation.go), a measurement aid; both run the same mirror core on either side.
//
// A node stopping closes its links with wire.AppShutdown; a peer that receives it logs the
// departure at INFO and redials, where any other loss of a link is a WARN.
//
// A killed node's peers do not wait for QUIC's idle timeout (heal.go): a peer's new link
// connection supersedes its older one at once (the accepting side closes the old one when the
// new one's catalog stream arrives), and the incarnation in its WATCH tells whether it
// restarted, in which case the accepting side also redials its own link to it.
//
// Each link keeps, per mirrored topic, the origin's head as the origin reports it (HEAD on the
// mirror stream and on the catalog stream) and the mirror's progress (stall.go): the lag in
// seconds is measured against that head, and Run's stall check reports a mirror that carries
// nothing while the head moves (StallAfter), one log line per link and check.
//
// Goroutines: Run owns one goroutine per link. A link's goroutine dials, runs the catalog
// stream's reader and one goroutine per open mirror stream (none for a parked mirror), opens
// and parks mirrors, and redials (resuming every mirror from its cursor) when the connection
// is lost; on a link to a node of this region it also runs the
// two raft stream writers. The serving side runs on the stream goroutines the node hands it
// (ServeStream).
package federation
