package replica

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"testing/cryptotest"

	"go.etcd.io/raft/v3"
)

// A learner proposed by a leader that then lost its leadership is still pending on the
// replica that leads next, even when that replica restarted after storing the entry (its
// memory of the change is gone, only its log holds it): until the entry applies, the new
// leader's Membership lacks the learner and must say ConfPending, or a move being undone
// there would call itself undone ("the learner is no member") and leave the learner the
// entry then adds in the group for good. Deterministic: the simulation's network, with a
// fixed seed (raft's election timeouts included).
func TestMembershipPendingOnLeaderAfterRestart(t *testing.T) {
	const seed = 30
	t.Logf("seed %d", seed)
	cryptotest.SetGlobalRandom(t, seed)
	cfg := defaultSimConfig(3)
	cfg.groups = 1
	cfg.dropRate, cfg.dupRate, cfg.proposeRate, cfg.crashRate, cfg.partitionRate = 0, 0, 0, 0, 0
	s, err := newSim(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	s.healAt = math.MaxInt // the cuts below stay until lifted here
	g := s.groups[0]
	stepUntil := func(what string, done func() bool) {
		t.Helper()
		for range 20000 {
			s.now++
			if err := s.step(true); err != nil {
				t.Fatal(s.fail(err))
			}
			if done() {
				return
			}
		}
		t.Fatal(s.fail(fmt.Errorf("never: %s", what)))
	}
	var a *simNode
	stepUntil("a leader with its log applied", func() bool {
		a = s.leaderOrAny(g, nil)
		if a == nil {
			return false
		}
		bs, _ := a.e.status(g)
		last, _ := a.st[0].LastIndex()
		return bs.Applied == last // its first entry of its term too: raft takes a change now
	})
	others := slices.DeleteFunc(slices.Clone(s.nodes), func(n *simNode) bool { return n == a })
	b, c := others[0], others[1]
	// Only a -> b carries messages: b stores the learner's entry, and nobody commits it.
	for _, cut := range [][2]uint64{{a.id, c.id}, {b.id, a.id}, {b.id, c.id}, {c.id, a.id}, {c.id, b.id}} {
		s.cut[cut] = true
	}
	idx, _ := a.st[0].LastIndex()
	idx++
	if err := a.e.proposeConfChange(g, AddLearner(9)); err != nil {
		t.Fatal(err)
	}
	stepUntil("the learner's entry stored on b", func() bool {
		last, _ := b.st[0].LastIndex()
		return last >= idx
	})
	t.Logf("t=%dms: node %d led and proposed learner 9 at index %d; node %d stored it; node %d did not", s.now, a.id, idx, b.id, c.id)
	// a goes down for good, b restarts (its log kept, its memory lost), and b and c talk.
	if err := s.crash(a); err != nil {
		t.Fatal(err)
	}
	a.downTil = math.MaxInt
	if err := s.crash(b); err != nil {
		t.Fatal(err)
	}
	b.downTil = s.now + 1
	delete(s.cut, [2]uint64{b.id, c.id})
	delete(s.cut, [2]uint64{c.id, b.id})
	ledEarly := 0
	stepUntil("learner 9 listed on b, leading", func() bool {
		if b.e == nil {
			return false
		}
		m, _ := b.e.membership(g)
		if m.Status.RaftState != raft.StateLeader {
			return false
		}
		if m.IsLearner(9) {
			return true
		}
		ledEarly++
		if !m.ConfPending {
			t.Fatalf("t=%dms: node %d leads (term %d, applied %d, its log holds learner 9's entry at %d) with learners %v and nothing pending",
				s.now, b.id, m.Status.GetTerm(), m.Status.Applied, idx, m.Learners)
		}
		return false
	})
	if ledEarly == 0 {
		t.Fatal("b never led before the entry applied: the test saw nothing")
	}
	t.Logf("t=%dms: node %d led %d steps with the change pending, then listed learner 9", s.now, b.id, ledEarly)
}
