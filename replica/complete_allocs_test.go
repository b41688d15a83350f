package replica

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"
	pb "go.etcd.io/raft/v3/raftpb"
)

// resultSM is a StateMachine that answers every entry with a result of its index, from a
// buffer it keeps: what the engine allocates around it is what is measured.
type resultSM struct{ res []Result }

func (*resultSM) Applied(uint64) (uint64, error) { return 0, nil }
func (*resultSM) Committed()                     {}
func (s *resultSM) Apply(_ *pebble.Batch, _, _ uint64, ents []Entry) ([]Result, error) {
	s.res = s.res[:0]
	for i, e := range ents {
		s.res = append(s.res, Result{Index: e.Index, Offset: uint64(i)})
	}
	return s.res, nil
}

// TestApplyAndCompleteAllocateNothingPerProposal bounds what a leader's engine allocates to
// apply a round's batch entries and answer the proposals they carry: a map of the results
// by index and a second decode of every batch entry in complete, and the records and
// proposals decoded into new slices in apply, were allocations per entry and per round
// (issue 29). Each proposal must still get its own result, in order.
func TestApplyAndCompleteAllocateNothingPerProposal(t *testing.T) {
	const node, entries, perEntry = 1, 8, 64
	sm := &resultSM{}
	e := &engine{cfg: Config{NodeID: node}, sm: sm}
	g := &group{id: 7}
	var ents []*pb.Entry
	seq := uint64(0)
	for i := range entries {
		subs := make([]subProposal, perEntry)
		for k := range subs {
			seq++
			subs[k] = subProposal{seq: seq, time: int64(seq), data: []byte("record")}
		}
		if i == entries/2 { // another node's entry among them: none of its proposals is ours
			ents = append(ents, &pb.Entry{Term: new(uint64(1)), Index: new(uint64(i + 1)), Data: encodeBatch(nil, node+1, subs)})
			seq -= perEntry
			continue
		}
		ents = append(ents, &pb.Entry{Term: new(uint64(1)), Index: new(uint64(i + 1)), Data: encodeBatch(nil, node, subs)})
	}
	mine := int(seq)
	var got []uint64 // the offset each proposal was answered with, by seq
	props := make([]proposal, mine)
	for i := range props {
		props[i] = proposal{seq: uint64(i + 1), term: 1, done: func(r Result, err error) {
			if err != nil {
				t.Fatalf("proposal %d: %v", i+1, err)
			}
			got[i] = r.Offset
		}}
	}
	pending := make([]proposal, 0, mine)
	r := &readyGroup{g: g}
	round := func() {
		g.pending = append(pending[:0], props...)
		e.roundStart()
		var after []func()
		if err := e.apply(nil, r, ents, &after); err != nil {
			t.Fatal(err)
		}
		e.complete(r)
		if len(g.pending) != 0 {
			t.Fatalf("%d proposals left pending", len(g.pending))
		}
	}
	got = make([]uint64, mine)
	round()
	for i, off := range got {
		// Results are by position among the round's records; the other node's entry
		// holds perEntry of them, before the proposals of the entries after it.
		want := uint64(i)
		if i >= (entries/2)*perEntry {
			want += perEntry
		}
		if off != want {
			t.Fatalf("proposal %d answered with result %d, want %d", i+1, off, want)
		}
	}
	allocs := testing.AllocsPerRun(50, round)
	t.Logf("%.1f allocations to apply %d batch entries and answer %d proposals", allocs, entries, mine)
	if allocs > 0 {
		t.Errorf("applying and answering a round's batch entries allocates %.1f times, want none", allocs)
	}
}
