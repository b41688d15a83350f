// Package vector is portable positions read from a region's log (docs/architecture.md,
// "Portable positions"): where a consumer resumes after a vector, the vector of a log's prefix,
// and a durable's vector raised by the positions mirrored from other regions.
//
// Every record carries its origin region and origin offset, and each origin's order is kept
// in every region's log (I7). So a position can be a vector {origin region -> last origin
// offset covered} that means the same in every region. Two things are done with it here:
//
//   - A SUBSCRIBE with a vector block (wire.SubscribeVector) resumes each topic it names
//     exactly after the vector: records of origin O with origin offset <= v[O] are skipped,
//     everything else is delivered, each origin in its order. The cursor starts at the first
//     record the vector does not cover (Start) and skips the covered records after it
//     (vectorState.skip, applied as records are encoded).
//   - A durable consumer's position is stored with the vector of what it acknowledged
//     (wal v3 positions): the ack reader advances it over the records acknowledged since the
//     last store (Advance), so the stored vector is the per-origin maximum over the
//     acknowledged prefix of this region's log, merged with the vector it resumed from.
//
// Cost, without an index of (origin, origin offset) -> local offset: finding where a vector
// resumes reads the log backwards from the head until every origin the topic holds (this
// region, and each region with a mirror cursor on the topic) has shown a covered record: about
// as many records as the consumer is behind, plus the mirroring skew between regions. An
// origin the vector does not name (nothing of it covered) is settled only at the first
// retained record, so then the whole retained log is read once. Storing a durable's vector
// reads each acknowledged record once more (just delivered, so from Pebble's cache), and the
// first store of a durable whose position has no vector yet (stored before vectors, or
// starting past the first retained record) reads backwards like a resume.
//
// It is functions of a wal.Log and owns no state: subscriptions (node/subscriptions, vector.go) and consumer
// groups use it alike.
package vector
