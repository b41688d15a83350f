// Package node is a QuicMQ broker node: the QUIC listener, client sessions, publish and
// subscription streams, and the wiring of the log (package wal), subject routing (package
// routing) and metrics.
//
// Goroutines and what they own:
//   - Run owns the accept loop, the topic watcher and one goroutine per connection (session).
//   - A session's goroutine accepts streams; each stream gets its own goroutine, so a stream
//     blocked on flow control holds up nothing else (one QUIC stream per subscription, I4).
//   - A publish stream has a reader (submits group-committed appends to the log) and a writer
//     (sends acks in order, after the synced commit: I2).
//   - A subscription stream has a sender (owns its cursors, reads the log up to the durable
//     high-watermark only: I3) and an ack reader. Its memory is its cursors plus a bounded
//     read-ahead, whatever its lag (I5).
package node
