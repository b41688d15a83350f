package federation

import (
	"bytes"
	"runtime"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/replica"
)

// raftSendRound is what one round of a loaded leader queues for one follower: appends of
// entries each holding a run of 1 KiB records (the replicated benchmark sees ~540 records
// per entry with 16 clients), heartbeats of other groups, and a vote response.
func raftSendRound(from, to uint64, appends, entryBytes int) []raftQueued {
	var q []raftQueued
	add := func(m replica.Message) { q = append(q, raftQueued{m: m, size: proto.Size(m.Raft) + 24}) }
	for i := range appends {
		data := bytes.Repeat([]byte{byte(i)}, entryBytes)
		add(replica.Message{Group: uint64(1 + i%3), Raft: &pb.Message{
			Type: pb.MsgApp.Enum(), From: new(from), To: new(to), Term: new(uint64(4)),
			LogTerm: new(uint64(4)), Index: new(uint64(100 + i)), Commit: new(uint64(99 + i)),
			Entries: []*pb.Entry{{Term: new(uint64(4)), Index: new(uint64(101 + i)), Type: pb.EntryNormal.Enum(), Data: data}},
		}})
	}
	for g := range uint64(3) {
		add(replica.Message{Group: 10 + g, Raft: &pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(from), To: new(to), Term: new(uint64(4)), Commit: new(uint64(7))}})
	}
	add(replica.Message{Group: 20, Raft: &pb.Message{Type: pb.MsgVoteResp.Enum(), From: new(from), To: new(to), Term: new(uint64(5)), Reject: new(true)}})
	return q
}

// TestRaftSenderBytes checks that the sender puts on the stream exactly the RAFT_BATCH
// frames docs/protocol.md describes (the replica codec's batch as the whole body, split
// under the frame limit, in queue order), round after round on one sender, whatever it
// does with its buffers.
func TestRaftSenderBytes(t *testing.T) {
	const from, to, maxFrame = 7, 9, 256 << 10
	var got bytes.Buffer
	s := newRaftSender(wire.NewWriter(&got), from, to, maxFrame)
	var want []byte
	for round, shape := range [][2]int{{2, 1000}, {6, 100 << 10}, {1, 200 << 10}, {0, 0}, {3, 250 << 10}, {2, 1000}} {
		q := raftSendRound(from, to, shape[0], shape[1])
		msgs, n, err := s.send(q)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		// The reference: the split writeRaft made before the sender existed.
		sent, sentBytes := 0, 0
		for len(q) > 0 {
			var part []replica.Message
			size := 0
			for len(q) > 0 && (len(part) == 0 || size+q[0].size <= maxFrame-64) {
				part = append(part, q[0].m)
				size += q[0].size
				q = q[1:]
			}
			b, err := replica.EncodeBatch(nil, from, to, part)
			if err != nil {
				t.Fatal(err)
			}
			want = wire.Append(want, &wire.RaftBatch{Batch: b})
			sent += len(part)
			sentBytes += len(b)
		}
		if msgs != sent || n != sentBytes {
			t.Errorf("round %d: send reported %d messages, %d bytes; want %d, %d", round, msgs, n, sent, sentBytes)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("round %d: the stream holds %d bytes that differ from the %d expected", round, got.Len(), len(want))
		}
	}
	// And the frames read back as the messages sent.
	rr := wire.NewReader(&got, wire.Limits{MaxFrame: maxFrame})
	frames := 0
	for {
		fr, err := rr.Read()
		if err != nil {
			break
		}
		if _, err := decodeRaftBatch(fr.(*wire.RaftBatch).Batch, from, to); err != nil {
			t.Fatalf("frame %d: %v", frames, err)
		}
		frames++
	}
	if frames < 8 {
		t.Fatalf("%d frames: the rounds should have been split under the frame limit", frames)
	}
}

// discard is a stream that takes every write, as io.Discard, but keeps no reference.
type discard struct{ n int64 }

func (d *discard) Write(p []byte) (int, error) { d.n += int64(len(p)); return len(p), nil }

// BenchmarkRaftSend measures a raft writer's rounds under load: each round four appends
// of one 512 KiB entry (about 500 records of 1 KiB) plus a few small messages, encoded
// and flushed to a stream that discards them.
func BenchmarkRaftSend(b *testing.B) {
	q := raftSendRound(1, 2, 4, 512<<10)
	s := newRaftSender(wire.NewWriter(&discard{}), 1, 2, 16<<20)
	b.ReportAllocs()
	total := 0
	for b.Loop() {
		_, n, err := s.send(q)
		if err != nil {
			b.Fatal(err)
		}
		total += n
	}
	b.SetBytes(int64(total / b.N))
}

// TestRaftSenderKeepsBuffer checks that a stream under steady large rounds encodes them
// without allocating (its buffer is kept), and that after a run of small rounds the large
// buffer is released (the next large round allocates again).
func TestRaftSenderKeepsBuffer(t *testing.T) {
	large, small := raftSendRound(1, 2, 4, 1<<20), raftSendRound(1, 2, 1, 100)
	s := newRaftSender(wire.NewWriter(&discard{}), 1, 2, 16<<20)
	send := func(q []raftQueued) {
		if _, _, err := s.send(q); err != nil {
			t.Fatal(err)
		}
	}
	send(large)
	if a := testing.AllocsPerRun(20, func() { send(large) }); a != 0 {
		t.Errorf("steady 4 MiB rounds: %.1f allocations a round, want 0 (the buffer kept)", a)
	}
	for range 2 * raftKeepRounds {
		send(small)
	}
	// Not AllocsPerRun: its warm-up call is the one that allocates.
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	send(large)
	runtime.ReadMemStats(&m1)
	if m1.TotalAlloc-m0.TotalAlloc < 1<<20 {
		t.Errorf("a large round after %d small ones allocated %d bytes: the large buffer was kept through them", 2*raftKeepRounds, m1.TotalAlloc-m0.TotalAlloc)
	}
	// Kept from then on: the round that grew the buffer grew it to what the next keeps.
	if a := testing.AllocsPerRun(5, func() { send(large) }); a != 0 {
		t.Errorf("large rounds after the one that grew the buffer: %.1f allocations a round, want 0", a)
	}
}

// TestRaftSenderGrowsOnce checks that a round whose batch outgrows the kept buffer grows
// it once, to a size the next rounds keep: before, the Flush of that round dropped the
// buffer grown for it, and the next round grew another onto memory new to the process.
func TestRaftSenderGrowsOnce(t *testing.T) {
	s := newRaftSender(wire.NewWriter(&discard{}), 1, 2, 16<<20)
	for _, entry := range []int{64 << 10, 256 << 10, 1 << 20, 3 << 20, 8 << 20} {
		q := raftSendRound(1, 2, 1, entry)
		send := func() {
			if _, _, err := s.send(q); err != nil {
				t.Fatal(err)
			}
		}
		send()
		// Not AllocsPerRun: its warm-up call would be the round measured.
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		send()
		runtime.ReadMemStats(&m1)
		if n := m1.TotalAlloc - m0.TotalAlloc; n > 64<<10 {
			t.Errorf("the round after the first of one %d-byte entry allocated %d bytes, want the buffer kept", entry, n)
		}
	}
}
