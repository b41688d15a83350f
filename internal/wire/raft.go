package wire

// Raft streams (node-to-node, between nodes of one region): a stream opened with RAFT carries
// RAFT_BATCH frames one way, from the node that opened it to the node that accepted it. The
// batch bytes are replica's codec (replica.EncodeBatch), opaque here; docs/protocol.md gives
// both layouts.
const (
	TypeRaft      Type = 0x48 // first frame of a raft stream: its class and both raft IDs
	TypeRaftBatch Type = 0x49 // opener -> acceptor: the raft messages of one batch
)

// Raft stream classes: the sender puts votes, heartbeats and every response on the control
// stream, appends and snapshots on the bulk stream, and gives the control stream the higher
// QUIC priority.
const (
	RaftControl byte = 0
	RaftBulk    byte = 1
)

// Raft opens a raft stream.
type Raft struct {
	Class byte   // RaftControl or RaftBulk
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
func (f *RaftBatch) decodeBody(d *dec) {
	if d.err == nil {
		f.Batch, d.b = d.b, d.b[len(d.b):]
	}
}
