package replica

import (
	"bytes"
	"io"
	"log"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// TestRaftClonesProposal checks what the engine's reused framing buffer (keepEnvelope)
// relies on: a leader's RawNode.Propose copies the proposal into its log before returning,
// so the caller may overwrite the bytes at once. It fails on a raft release that stops
// copying (raft.appendEntry's clone).
func TestRaftClonesProposal(t *testing.T) {
	st := raft.NewMemoryStorage()
	if err := st.ApplySnapshot(&pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(1)), Term: new(uint64(1)),
		ConfState: &pb.ConfState{Voters: []uint64{1}}}}); err != nil {
		t.Fatal(err)
	}
	rn, err := raft.NewRawNode(&raft.Config{ID: 1, ElectionTick: 10, HeartbeatTick: 1, Storage: st,
		MaxSizePerMsg: 1 << 20, MaxInflightMsgs: 16, Logger: &raft.DefaultLogger{Logger: log.New(io.Discard, "", 0)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rn.Campaign(); err != nil {
		t.Fatal(err)
	}
	drain := func() []*pb.Entry {
		var ents []*pb.Entry
		for rn.HasReady() {
			rd := rn.Ready()
			if err := st.Append(rd.Entries); err != nil {
				t.Fatal(err)
			}
			ents = append(ents, rd.Entries...)
			rn.Advance(rd)
		}
		return ents
	}
	drain()
	if rn.BasicStatus().RaftState != raft.StateLeader {
		t.Fatal("not leader after campaigning alone")
	}
	buf := []byte("first proposal")
	if err := rn.Propose(buf); err != nil {
		t.Fatal(err)
	}
	copy(buf, "XXXXXXXXXXXXXX") // the engine frames the next proposal in the same buffer
	var got [][]byte
	for _, e := range drain() {
		if len(e.GetData()) > 0 {
			got = append(got, e.GetData())
		}
	}
	if len(got) != 1 || !bytes.Equal(got[0], []byte("first proposal")) {
		t.Fatalf("entries after overwriting the proposed buffer: %q, want [\"first proposal\"]: raft no longer copies proposals, and engine.keepEnvelope must stop reusing its buffer", got)
	}
}
