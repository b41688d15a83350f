package replica

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"go.etcd.io/raft/v3"
)

// newCalmSim is a simulation without faults or workload, stepped by hand.
func newCalmSim(t *testing.T, nodes int) *sim {
	t.Helper()
	cfg := defaultSimConfig(nodes)
	cfg.dropRate, cfg.dupRate, cfg.crashRate, cfg.partitionRate, cfg.proposeRate = 0, 0, 0, 0, 0
	s, err := newSim(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	return s
}

// stepUntil steps s until cond holds, checking the invariants; at most
// 10,000 virtual milliseconds.
func (s *sim) stepUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 10000 {
		if cond() {
			return
		}
		s.now++
		if err := s.step(true); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatalf("not reached in 10 s of virtual time: %s", what)
}

func (s *sim) leads(n *simNode, g uint64) bool {
	st, _ := n.e.status(g)
	return st.RaftState == raft.StateLeader
}

// TestEngineOneBatchAndOneSendPerPeerPerRound: proposals to two groups led
// by one node leave in one Pebble batch per round and one Send per peer
// per round carrying both groups' messages.
func TestEngineOneBatchAndOneSendPerPeerPerRound(t *testing.T) {
	s := newCalmSim(t, 3)
	n := s.nodes[0]
	for _, g := range s.groups {
		if err := n.e.groups[g].rn.Campaign(); err != nil {
			t.Fatal(err)
		}
	}
	s.stepUntil(t, "node 1 leads both groups, quiet", func() bool {
		return s.leads(n, s.groups[0]) && s.leads(n, s.groups[1]) && n.e.stats.Quiesced == 2 && len(s.net) == 0
	})
	type send struct {
		to     uint64
		groups map[uint64]bool
	}
	var sends []send
	s.onSend = func(from, to uint64, msgs []Message) {
		if from != n.id {
			return
		}
		x := send{to: to, groups: map[uint64]bool{}}
		for _, m := range msgs {
			x.groups[m.Group] = true
		}
		sends = append(sends, x)
	}
	var acked int
	for _, g := range s.groups {
		for range 3 {
			n.e.propose(g, []byte("v"), func(_ Result, err error) {
				if err != nil {
					t.Errorf("propose: %v", err)
				}
				acked++
			})
		}
	}
	before := n.e.stats
	if err := n.e.process(); err != nil {
		t.Fatal(err)
	}
	rounds := n.e.stats.Rounds - before.Rounds
	if rounds != 1 || n.e.stats.Commits-before.Commits != 1 || n.e.stats.SyncCommits-before.SyncCommits != 1 {
		t.Fatalf("6 proposals in two groups took %d rounds, %d commits, %d synced; want 1 of each",
			rounds, n.e.stats.Commits-before.Commits, n.e.stats.SyncCommits-before.SyncCommits)
	}
	if len(sends) != 2 {
		t.Fatalf("the round made %d Sends, want one per peer (2)", len(sends))
	}
	for _, x := range sends {
		if len(x.groups) != 2 {
			t.Fatalf("the Send to node %d carried groups %v, want both", x.to, x.groups)
		}
	}
	s.stepUntil(t, "all 6 proposals acknowledged", func() bool { return acked == 6 })
}

// TestEngineQuietGroupCostsNothing: once idle, a group neither ticks nor
// sends, however long it stays idle; a proposal wakes it.
func TestEngineQuietGroupCostsNothing(t *testing.T) {
	s := newCalmSim(t, 3)
	var sent int
	s.onSend = func(uint64, uint64, []Message) { sent++ }
	s.stepUntil(t, "every group quiet on every node", func() bool {
		for _, n := range s.nodes {
			if n.e.stats.Quiesced != len(s.groups) {
				return false
			}
		}
		return len(s.net) == 0
	})
	ticks := make([]uint64, len(s.nodes))
	for i, n := range s.nodes {
		ticks[i] = n.e.stats.GroupTicks
	}
	sent = 0
	for range 5000 { // 500 ticks of virtual time
		s.now++
		if err := s.step(true); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range s.nodes {
		if n.e.stats.GroupTicks != ticks[i] {
			t.Fatalf("node %d ticked quiet groups %d times", n.id, n.e.stats.GroupTicks-ticks[i])
		}
	}
	if sent != 0 {
		t.Fatalf("quiet groups sent %d message batches", sent)
	}
	var leader *simNode
	for _, n := range s.nodes {
		if s.leads(n, s.groups[0]) {
			leader = n
		}
	}
	var res Result
	var err error = errors.New("not answered")
	leader.e.propose(s.groups[0], []byte("wake"), func(r Result, e error) { res, err = r, e })
	s.stepUntil(t, "the proposal to a quiet group answered", func() bool { return err == nil })
	if res.Offset != 0 {
		t.Fatalf("first record's offset = %d", res.Offset)
	}
}

// A batch envelope round-trips, and each kind of damage is refused by name.
func TestBatchEnvelope(t *testing.T) {
	subs := []subProposal{{seq: 5, time: 100, data: []byte("one")}, {seq: 6, time: 100, data: []byte{}}, {seq: 7, time: 101, data: []byte("three")}}
	p := encodeBatch(nil, 42, subs)
	b, err := decodeBatch(p)
	if err != nil || b.node != 42 || len(b.subs) != 3 || string(b.subs[2].data) != "three" || b.subs[1].seq != 6 {
		t.Fatalf("decodeBatch(encodeBatch) = %+v, %v", b, err)
	}
	for _, c := range []struct {
		name string
		p    []byte
		want string
	}{
		{"truncated", p[:len(p)-1], "past the end"},
		{"trailing", append(slices.Clone(p), 0), "trailing bytes"},
		{"no proposals", encodeBatch(nil, 42, nil), "0 proposals"},
		{"a single envelope", []byte{envelopeVersion, 0}, "no batch header"},
	} {
		if _, err := decodeBatch(c.p); err == nil || !errors.Is(err, errCorrupt) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: decodeBatch = %v, want errCorrupt naming %q", c.name, err, c.want)
		}
	}
}
