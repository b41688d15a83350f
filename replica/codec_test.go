package replica

import (
	"errors"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func hb(group, term, commit uint64) Message {
	return Message{Group: group, Raft: &pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(term), Commit: new(commit)}}
}

func TestBatchRoundTripAndCoalescedHeartbeats(t *testing.T) {
	app := Message{Group: 9, Raft: &pb.Message{
		Type: pb.MsgApp.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(uint64(4)), LogTerm: new(uint64(3)),
		Index: new(uint64(10)), Commit: new(uint64(9)), Entries: []*pb.Entry{ent(11, 4, "payload")},
	}}
	resp := Message{Group: 8, Raft: &pb.Message{Type: pb.MsgHeartbeatResp.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(uint64(4))}}
	quiesce := hb(7, 4, 12)
	quiesce.Quiesce = true
	withCtx := hb(6, 4, 12)
	withCtx.Raft.Context = []byte("read-index")
	wake := Message{Group: 5, Wake: true, Raft: &pb.Message{Type: pb.MsgHeartbeatResp.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(uint64(4))}}
	in := []Message{hb(1, 4, 12), app, resp, quiesce, withCtx, wake}
	b, err := EncodeBatch(nil, 1, 2, in)
	if err != nil {
		t.Fatal(err)
	}
	from, to, out, err := DecodeBatch(b)
	if err != nil || from != 1 || to != 2 || len(out) != len(in) {
		t.Fatalf("decode: %d %d %d messages, %v", from, to, len(out), err)
	}
	for i := range in {
		if out[i].Group != in[i].Group || out[i].Quiesce != in[i].Quiesce || out[i].Wake != in[i].Wake || !proto.Equal(out[i].Raft, in[i].Raft) {
			t.Fatalf("message %d: %+v, sent %+v", i, out[i].Raft, in[i].Raft)
		}
	}
	// 1,000 groups' heartbeats to one peer: a few bytes each.
	var hbs []Message
	for g := range uint64(1000) {
		hbs = append(hbs, hb(g, 5, 100))
	}
	b, err = EncodeBatch(nil, 1, 2, hbs)
	if err != nil {
		t.Fatal(err)
	}
	if per := float64(len(b)) / 1000; per > 6 {
		t.Fatalf("a coalesced heartbeat takes %.1f bytes", per)
	}
}

func TestDecodeBatchRefusesDamage(t *testing.T) {
	good, err := EncodeBatch(nil, 1, 2, []Message{hb(1, 2, 3)})
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string][]byte{
		"empty":          nil,
		"version":        append([]byte{9}, good[1:]...),
		"truncated":      good[:len(good)-1],
		"trailing bytes": append(append([]byte(nil), good...), 0),
		"huge count":     {codecVersion, 1, 2, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"unknown kind":   {codecVersion, 1, 2, 1, 7, 1, 1, 1},
		"wake commit":    {codecVersion, 1, 2, 1, kindWake, 1, 1, 1},
	} {
		if _, _, _, err := DecodeBatch(p); !errors.Is(err, ErrBadBatch) {
			t.Errorf("%s: %v, want ErrBadBatch", name, err)
		}
	}
}

func FuzzDecodeBatch(f *testing.F) {
	good, _ := EncodeBatch(nil, 1, 2, []Message{hb(1, 2, 3), {Group: 4, Raft: &pb.Message{Type: pb.MsgVote.Enum(), Term: new(uint64(3))}},
		{Group: 5, Wake: true, Raft: &pb.Message{Type: pb.MsgHeartbeatResp.Enum(), Term: new(uint64(3))}}})
	f.Add(good)
	f.Add([]byte{codecVersion, 0, 0, 0})
	f.Fuzz(func(t *testing.T, p []byte) {
		from, to, msgs, err := DecodeBatch(p)
		if err != nil {
			return
		}
		if _, err := EncodeBatch(nil, from, to, msgs); err != nil {
			t.Fatalf("a decoded batch does not encode: %v", err)
		}
	})
}
