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
	s, stepUntil := quietSim(t, 3, 30)
	g := s.groups[0]
	a := settledLeader(s, stepUntil, s.nodes)
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

// quietSim is a simulation of one group on nodes nodes with a lossless network and no
// faults or proposals of its own (the test makes them), and stepUntil, which runs it until
// done says so.
func quietSim(t *testing.T, nodes int, seed uint64) (*sim, func(what string, done func() bool)) {
	t.Helper()
	t.Logf("seed %d", seed)
	cryptotest.SetGlobalRandom(t, seed)
	cfg := defaultSimConfig(nodes)
	cfg.groups = 1
	cfg.dropRate, cfg.dupRate, cfg.proposeRate, cfg.crashRate, cfg.partitionRate = 0, 0, 0, 0, 0
	s, err := newSim(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	s.healAt = math.MaxInt // the tests' cuts stay until they lift them
	return s, func(what string, done func() bool) {
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
}

// settledLeader runs s until one of among leads the group with its whole log applied (its
// first entry of its term too: raft takes a membership change from then on).
func settledLeader(s *sim, stepUntil func(string, func() bool), among []*simNode) *simNode {
	g := s.groups[0]
	var l *simNode
	stepUntil("a leader with its log applied", func() bool {
		for _, n := range among {
			if n.e == nil {
				continue
			}
			bs, _ := n.e.status(g)
			last, _ := n.st[0].LastIndex()
			if bs.RaftState == raft.StateLeader && bs.Applied == last {
				l = n
				return true
			}
		}
		return false
	})
	return l
}

// A membership change a replica stored as a follower and a later leader overwrote (it never
// had it) is not pending when that replica leads afterwards, even in a group gone quiet
// whose log never reaches the old entry's index again: else a move being undone there
// would wait for it for ever. Five nodes: a leads and appends three entries and a learner
// with b alone (no quorum), a goes down, c, d and e elect a leader without them, b takes that leader's
// log, and that leader hands its leadership to b.
func TestMembershipNotPendingAfterOverwrite(t *testing.T) {
	s, stepUntil := quietSim(t, 5, 31)
	g := s.groups[0]
	a := settledLeader(s, stepUntil, s.nodes)
	others := slices.DeleteFunc(slices.Clone(s.nodes), func(n *simNode) bool { return n == a })
	b, rest := others[0], others[1:]
	cutAll := func(n *simNode) {
		for _, o := range s.nodes {
			if o != n {
				s.cut[[2]uint64{n.id, o.id}], s.cut[[2]uint64{o.id, n.id}] = true, true
			}
		}
	}
	cutAll(a)
	cutAll(b)
	delete(s.cut, [2]uint64{a.id, b.id})
	delete(s.cut, [2]uint64{b.id, a.id}) // a and b: no quorum of five
	for range 3 {
		prop, done := s.proposal(a, g)
		a.e.propose(g, prop, done)
	}
	if err := a.e.proposeConfChange(g, AddLearner(9)); err != nil {
		t.Fatal(err)
	}
	stepUntil("four entries stored on b", func() bool {
		bl, _ := b.st[0].LastIndex()
		al, _ := a.st[0].LastIndex()
		return bl == al && bl >= 4
	})
	old, _ := b.st[0].LastIndex()
	if err := s.crash(a); err != nil {
		t.Fatal(err)
	}
	a.downTil = math.MaxInt
	l := settledLeader(s, stepUntil, rest)
	t.Logf("t=%dms: node %d stored up to %d, learner 9's entry last; node %d leads without it", s.now, b.id, old, l.id)
	for _, o := range s.nodes {
		delete(s.cut, [2]uint64{b.id, o.id})
		delete(s.cut, [2]uint64{o.id, b.id})
	}
	stepUntil("b has the leader's log", func() bool {
		bl, _ := b.st[0].LastIndex()
		ll, _ := l.st[0].LastIndex()
		bs, _ := b.e.status(g)
		return bl == ll && bs.Applied == ll
	})
	if err := l.e.transferLeadership(g, b.id); err != nil {
		t.Fatal(err)
	}
	seen := false
	stepUntil("b leading with nothing pending", func() bool {
		if b.e == nil {
			return false
		}
		m, _ := b.e.membership(g)
		if m.Status.RaftState != raft.StateLeader {
			return false
		}
		last, _ := b.st[0].LastIndex()
		if m.IsLearner(9) {
			t.Fatalf("learner 9 listed: its entry was never committed")
		}
		if m.Status.Applied == last && m.ConfPending && !seen {
			seen = true
			t.Logf("t=%dms: node %d leads, its log applied to %d, and a change is pending (the overwritten entry was at %d)", s.now, b.id, last, old)
		}
		return !m.ConfPending
	})
	t.Logf("t=%dms: node %d leads with nothing pending", s.now, b.id)
}
