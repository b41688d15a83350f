package replica

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
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

// A membership change proposed on the leader is pending until it applies: until then the
// configuration raft reports lacks it, and Membership says so (ConfPending), so that a
// caller deciding from the configuration (a move being undone: "the learner is not in the
// group") waits for it instead of acting on the configuration before it.
func TestMembershipConfPendingUntilApplied(t *testing.T) {
	rs, _ := startRegion(t, 3, []uint64{1})
	leaderOf(t, rs, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d := currentLeader(ctx, rs, 1)
	type seen struct {
		m   Membership
		err error
	}
	ch := make(chan seen, 1)
	if err := d.exec(ctx, func(e *engine) {
		err := e.proposeConfChange(1, AddLearner(9))
		m, _ := e.membership(1)
		ch <- seen{m, err}
	}); err != nil {
		t.Fatal(err)
	}
	got := <-ch
	if got.err != nil {
		t.Fatal(got.err)
	}
	if got.m.IsLearner(9) || !got.m.ConfPending {
		t.Fatalf("right after the proposal: learners %v, pending %v; want 9 not yet listed and the change pending", got.m.Learners, got.m.ConfPending)
	}
	testlog.WaitForErr(t, 20*time.Second, "the learner listed and nothing pending", func() error {
		m, err := d.Membership(ctx, 1)
		if err != nil {
			return err
		}
		if !m.IsLearner(9) || m.ConfPending {
			return fmt.Errorf("learners %v, pending %v", m.Learners, m.ConfPending)
		}
		return nil
	})
}

// TestRemovedReplicaGoesQuiet: a replica a configuration change removed, follower or
// leader, stops ticking and asking the group to wake it: it goes quiet (a moved replica
// costs nothing while its node keeps it), while the group goes on without it. Without that
// a removed follower ticked for ever, and a removed leader, knowing no leader once it stepped
// down, sent the others a wake every two ticks.
func TestRemovedReplicaGoesQuiet(t *testing.T) {
	for _, which := range []string{"follower", "leader"} {
		t.Run(which, func(t *testing.T) {
			rs, _ := startRegion(t, 4, []uint64{1})
			proposeAll(t, rs, 1, 3, "a")
			l := leaderOf(t, rs, 1)
			gone := l
			if which == "follower" {
				for _, r := range rs {
					if r != l {
						gone = r
						break
					}
				}
			}
			cc := &pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{{Type: pb.ConfChangeRemoveNode.Enum(), NodeId: new(gone.id)}}}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := l.d.ProposeConfChange(ctx, 1, cc); err != nil {
				t.Fatalf("remove node %d: %v", gone.id, err)
			}
			testlog.WaitForErr(t, 20*time.Second, fmt.Sprintf("removed node %d to go quiet", gone.id), func() error {
				st, err := gone.d.Stats(context.Background())
				if err != nil || st.Quiesced != 1 {
					return fmt.Errorf("stats %+v, %v", st, err)
				}
				return nil
			})
			var rest []*testReplica
			for _, r := range rs {
				if r != gone {
					rest = append(rest, r)
				}
			}
			if res := proposeAll(t, rest, 1, 1, "b"); res[0].Offset != 3 {
				t.Fatalf("offset after the removal %d, want 3", res[0].Offset)
			}
		})
	}
}
