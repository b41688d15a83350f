// Package wire is the frame codec shared by the node, the client SDK and (later) federation
// links. It owns the byte layout of everything that crosses a QUIC stream, and nothing else:
// no sockets, no goroutines.
//
// A frame is a 1-byte type, a 4-byte big-endian body length and the body. Body fields are
// unsigned LEB128 varints, varint-length-prefixed byte strings and single bytes. The full
// specification, precise enough to write a client in another language, is docs/protocol.md.
//
// Everything a peer sends is untrusted: every length is checked against the configured Limits
// before anything is allocated, and decoding never panics (see the fuzz targets).
package wire
