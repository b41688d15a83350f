package replica

import (
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

func TestReplaceStep(t *testing.T) {
	leader := func(commit uint64) raft.BasicStatus {
		var bs raft.BasicStatus
		bs.ID, bs.RaftState, bs.HardState = 1, raft.StateLeader, &pb.HardState{Commit: new(commit)}
		return bs
	}
	follower := raft.BasicStatus{}
	follower.ID, follower.RaftState = 1, raft.StateFollower
	const old, nw = 3, 9
	for _, c := range []struct {
		name string
		m    Membership
		want ReplaceState
		cc   string
	}{
		{"follower", Membership{Status: follower, Voters: []uint64{1, 2, old}}, ReplaceNotLeader, ""},
		{"add learner", Membership{Status: leader(50), Voters: []uint64{1, 2, old}, Match: map[uint64]uint64{}, Active: map[uint64]bool{}}, ReplaceAddLearner, "ConfChangeAddLearnerNode"},
		{"old alive", Membership{Status: leader(50), Voters: []uint64{1, 2, old}, Active: map[uint64]bool{old: true}}, ReplaceOldAlive, ""},
		{"self", Membership{Status: leader(50), Voters: []uint64{1, 2, old}}, ReplaceAddLearner, "ConfChangeAddLearnerNode"},
		{"catching up", Membership{Status: leader(50), Voters: []uint64{1, 2, old}, Learners: []uint64{nw}, Match: map[uint64]uint64{nw: 40}}, ReplaceCatchingUp, ""},
		{"promote", Membership{Status: leader(50), Voters: []uint64{1, 2, old}, Learners: []uint64{nw}, Match: map[uint64]uint64{nw: 50}}, ReplacePromote, "ConfChangeAddNode"},
		{"joint", Membership{Status: leader(52), Voters: []uint64{1, 2, nw}, Outgoing: []uint64{1, 2, old}}, ReplaceBusy, ""},
		{"done", Membership{Status: leader(53), Voters: []uint64{1, 2, nw}}, ReplaceDone, ""},
		{"not a member", Membership{Status: leader(53), Voters: []uint64{1, 2, 4}}, ReplaceNotMember, ""},
		{"both vote", Membership{Status: leader(53), Voters: []uint64{1, 2, old, nw}}, ReplaceRemoveOld, "ConfChangeRemoveNode"},
	} {
		st, cc := ReplaceStep(c.m, old, nw, 0)
		if c.name == "self" {
			st, cc = ReplaceStep(c.m, 1, nw, 0)
			c.want, c.cc = ReplaceOldAlive, ""
		}
		got := ""
		if cc != nil {
			got = cc.GetChanges()[0].GetType().String()
		}
		if st != c.want || got != c.cc {
			t.Errorf("%s: %v %s, want %v %s", c.name, st, got, c.want, c.cc)
		}
		if st == ReplacePromote {
			if len(cc.GetChanges()) != 2 || cc.GetChanges()[1].GetType() != pb.ConfChangeRemoveNode || cc.GetChanges()[1].GetNodeId() != old ||
				cc.GetTransition() != pb.ConfChangeTransitionJointImplicit {
				t.Errorf("promote: %v, want one joint change adding %d and removing %d", raft.DescribeConfChange(cc), nw, old)
			}
		}
	}
}
