package wire

import "encoding/binary"

// Raft streams (node-to-node, between nodes of one region): a stream opened with RAFT carries
// RAFT_BATCH frames one way, from the node that opened it to the node that accepted it. The
// batch bytes are replica's codec (replica.EncodeBatch), opaque here; docs/protocol.md gives
// both layouts.
const (
	TypeRaft      Type = 0x48 // first frame of a raft stream: its class and both raft IDs
	TypeRaftBatch Type = 0x49 // opener -> acceptor: the raft messages of one batch
	TypeRaftFetch Type = 0x4c // opener -> acceptor, on a fetch stream: the records a catch-up needs
	TypeRaftChunk Type = 0x4d // acceptor -> opener, on a fetch stream: one chunk of them
)

// Raft stream classes: the sender puts votes, heartbeats and every response on the control
// stream, appends and snapshots on the bulk stream, and gives the control stream the higher
// QUIC priority. A fetch stream (one per catch-up span, the lowest priority) carries one
// RAFT_FETCH and the RAFT_CHUNK frames that answer it.
const (
	RaftControl byte = 0
	RaftBulk    byte = 1
	RaftFetch   byte = 2
)

// Raft opens a raft stream.
type Raft struct {
	Class byte   // RaftControl, RaftBulk or RaftFetch
	From  uint64 // raft node ID of the sender
	To    uint64 // raft node ID the sender expects to reach
}

func (*Raft) Type() Type { return TypeRaft }

func (f *Raft) appendBody(e enc) enc { return e.byte1(f.Class).uvarint(f.From).uvarint(f.To) }
func (f *Raft) decodeBody(d *dec) {
	f.Class = d.byte1("class")
	f.From = d.uvarint("from")
	f.To = d.uvarint("to")
}

// RaftBatch is one batch of raft messages; the frame's whole body is the batch.
type RaftBatch struct {
	Batch []byte // aliases the frame body
}

func (*RaftBatch) Type() Type { return TypeRaftBatch }

func (f *RaftBatch) appendBody(e enc) enc { return append(e, f.Batch...) }

// WriteRaftBatch is Write(&RaftBatch{Batch: body}) for the body that encode appends to
// the slice it is given, without the copy of a body built apart: encode appends the batch
// to the Writer's buffer directly, with room for size bytes already made. It returns the
// body's length. An error from encode leaves the buffer as it was.
func (w *Writer) WriteRaftBatch(size int, encode func(dst []byte) ([]byte, error)) (int, error) {
	w.closeOpen()
	start := len(w.buf)
	if need := start + headerLen + size; need > cap(w.buf) {
		// Not slices.Grow, which copies the old buffer's whole capacity: only what it
		// holds, into room for a quarter more than this frame needs, or into the capacity
		// Flush is to keep (KeepBuffer) when that is more, so that the Flush below keeps
		// the new buffer rather than drop it and grow another next time.
		buf := make([]byte, start, max(need+need/4, w.keep))
		copy(buf, w.buf)
		w.buf = buf
	}
	buf := append(w.buf, byte(TypeRaftBatch), 0, 0, 0, 0)
	b, err := encode(buf)
	if err != nil {
		w.buf = buf[:start]
		return 0, err
	}
	n := len(b) - start - headerLen
	binary.BigEndian.PutUint32(b[start+1:], uint32(n))
	w.buf = b
	if len(w.buf) >= 64<<10 {
		return n, w.Flush()
	}
	return n, nil
}

func (f *RaftBatch) decodeBody(d *dec) {
	if d.err == nil {
		f.Batch, d.b = d.b, d.b[len(d.b):]
		if len(f.Batch) == 0 {
			f.Batch = nil // an empty batch decodes alike however it was read
		}
	}
}

// RaftFetchReq asks the accepting node for records [From, To) of a replica group's log (a
// topic), as it applied them, in chunks of at most MaxBytes of records each.
type RaftFetchReq struct {
	Group    uint64
	Log      string
	From, To uint64
	MaxBytes uint64
}

func (*RaftFetchReq) Type() Type { return TypeRaftFetch }

func (f *RaftFetchReq) appendBody(e enc) enc {
	return e.uvarint(f.Group).str(f.Log).uvarint(f.From).uvarint(f.To).uvarint(f.MaxBytes)
}
func (f *RaftFetchReq) decodeBody(d *dec) {
	f.Group = d.uvarint("group")
	f.Log = d.str("log")
	f.From = d.uvarint("from")
	f.To = d.uvarint("to")
	f.MaxBytes = d.uvarint("max_bytes")
}

// RaftChunk is one chunk of the records a RAFT_FETCH asked for: Next is the offset after
// its last record; the rest of the body is the chunk (replica's codec, opaque here).
type RaftChunk struct {
	Next  uint64
	Chunk []byte // aliases the frame body
}

func (*RaftChunk) Type() Type { return TypeRaftChunk }

func (f *RaftChunk) appendBody(e enc) enc { return append(e.uvarint(f.Next), f.Chunk...) }
func (f *RaftChunk) decodeBody(d *dec) {
	f.Next = d.uvarint("next")
	if d.err == nil {
		f.Chunk, d.b = d.b, d.b[len(d.b):]
		if len(f.Chunk) == 0 {
			f.Chunk = nil
		}
	}
}
