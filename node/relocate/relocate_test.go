package relocate

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/replica"
)

// The relocator's rules over a fake region: what it needs of the node is its three
// interfaces, nothing else (doc.go). Whole regions: node/drain_test.go, move_test.go.

// fakeRegion is a region as Raft, Meta and Mesh: nodes by name with raft IDs, groups, who
// is up; proposals are recorded, and none is ever leader.
type fakeRegion struct {
	mu       sync.Mutex
	nodes    []Member // by name
	voters   []uint64
	learners []uint64
	groups   []Group // by ID
	down     map[string]bool
	proposed [][]byte
}

var errFake = errors.New("fake: not here")

func (f *fakeRegion) Role(uint64) (replica.Role, bool) { return replica.Role{}, false }
func (f *fakeRegion) Membership(context.Context, uint64) (replica.Membership, error) {
	return replica.Membership{}, errFake
}
func (f *fakeRegion) Propose(_ context.Context, _ uint64, data []byte) (replica.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.proposed = append(f.proposed, slices.Clone(data))
	return replica.Result{}, nil
}
func (f *fakeRegion) ProposeConfChange(context.Context, uint64, *raftpb.ConfChangeV2) error {
	return errFake
}
func (f *fakeRegion) TransferLeadership(context.Context, uint64, uint64) error { return errFake }
func (f *fakeRegion) JoinGroup(context.Context, uint64) error                  { return nil }
func (f *fakeRegion) Wake(context.Context, uint64) error                       { return nil }
func (f *fakeRegion) CatchupBytes(context.Context, uint64) (uint64, error)     { return 0, errFake }

func (f *fakeRegion) Formed() bool { return true }
func (f *fakeRegion) Members() Members {
	m := Members{Voters: f.voters, Learners: f.learners, IDs: map[string]uint64{}, Names: map[uint64]string{}}
	for _, n := range f.nodes {
		m.IDs[n.Name], m.Names[n.ID] = n.ID, n.Name
	}
	return m
}
func (f *fakeRegion) Groups() []Group { return slices.Clone(f.groups) }
func (f *fakeRegion) Group(id uint64) (Group, bool) {
	i := slices.IndexFunc(f.groups, func(g Group) bool { return g.ID == id })
	if i < 0 {
		return Group{}, false
	}
	return f.groups[i], true
}
func (f *fakeRegion) LocalGroups() []uint64                    { return nil }
func (f *fakeRegion) GroupLabel(uint64) string                 { return "" }
func (f *fakeRegion) ReadAll(context.Context) bool             { return true }
func (f *fakeRegion) WaitRead(context.Context, uint64)         {}
func (f *fakeRegion) Moved(uint64, string, string, uint64)     {}
func (f *fakeRegion) Gossip() bool                             { return true }
func (f *fakeRegion) RegionMembers() []gossip.Member           { return nil }
func (f *fakeRegion) SetTag(string, string) error              { return nil }
func (f *fakeRegion) RaftMembers() []Member                    { return f.nodes }
func (f *fakeRegion) Reachable(name string) bool               { return !f.down[name] }
func (f *fakeRegion) RegionKnows(string, int) (bool, []string) { return true, nil }
func (f *fakeRegion) MemberStatus(name string) gossip.Status {
	if f.down[name] {
		return gossip.StatusFailed
	}
	return gossip.StatusAlive
}
func (f *fakeRegion) MemberName(id uint64) string {
	for _, n := range f.nodes {
		if n.ID == id {
			return n.Name
		}
	}
	return ""
}

// newFakeRegion has nodes a..e (raft IDs 11..15, all metadata voters but e, a learner) and
// the groups given as their replicas' names (IDs 2, 3, ...); this node is a.
func newFakeRegion(t *testing.T, groups ...[]string) (*fakeRegion, *Relocator) {
	f := &fakeRegion{down: map[string]bool{}}
	for i, name := range []string{"a", "b", "c", "d", "e"} {
		f.nodes = append(f.nodes, Member{Name: name, ID: uint64(11 + i), Alive: true})
	}
	f.voters, f.learners = []uint64{11, 12, 13, 14}, []uint64{15}
	for i, names := range groups {
		g := Group{ID: uint64(2 + i), Label: "g" + strconv.Itoa(2+i)}
		for _, nm := range names {
			g.Replicas = append(g.Replicas, Replica{Name: nm, ID: f.Members().IDs[nm]})
			g.Local = g.Local || nm == "a"
		}
		f.groups = append(f.groups, g)
	}
	r := New(Config{Name: "a", Region: "eu", ID: 11, Replicas: 3,
		Settings: Settings{TickInterval: time.Millisecond, ObserveInterval: time.Millisecond, QuorumTimeout: time.Second,
			ElectionTicks: 10, Moves: 2, CaughtUp: 64},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: prometheus.NewRegistry(),
		Changes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "changes"}, []string{"step"}),
		Raft:    f, Meta: f, Mesh: f})
	return f, r
}

// takeMoves returns, and forgets, the move records proposed.
func (f *fakeRegion) takeMoves(t *testing.T) []moveRec {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []moveRec
	for _, p := range f.proposed {
		rec, err := decodeMove(p)
		if err != nil {
			t.Fatalf("a proposal that is no move record: %x: %v", p, err)
		}
		out = append(out, rec)
	}
	f.proposed = nil
	return out
}

// TestRemovalMovesToTheNodesHoldingFewest: the metadata leader moves a removed node's
// replicas, at most Moves at a time, each to a node that is up, stays, does not hold the
// group and holds the fewest groups.
func TestRemovalMovesToTheNodesHoldingFewest(t *testing.T) {
	ctx := context.Background()
	f, r := newFakeRegion(t, []string{"a", "b", "d"}, []string{"b", "c", "d"}, []string{"a", "c", "d"}, []string{"a", "b", "c"})
	r.ApplyMove(ctx, encodeMove(moveRec{kind: moveKindRemove, name: "d", at: 1}))
	if !r.Gone("d") {
		t.Fatal("d applied as removed is not gone")
	}
	r.planMoves(ctx)
	starts := f.takeMoves(t)
	// a, b, c and d hold 3 groups each, e none: e gets the first, and with 1 the second.
	want := []moveRec{
		{kind: moveKindStart, group: 2, from: "d", fromID: 14, to: "e", toID: 15},
		{kind: moveKindStart, group: 3, from: "d", fromID: 14, to: "e", toID: 15},
	}
	if !slices.Equal(starts, want) {
		t.Fatalf("proposed %+v, want %+v", starts, want)
	}
	for _, s := range starts {
		r.ApplyMove(ctx, encodeMove(s))
	}
	r.planMoves(ctx)
	if more := f.takeMoves(t); len(more) != 0 {
		t.Fatalf("with Moves (2) in progress, proposed %+v", more)
	}
	// One ends: the third of d's groups goes to the node holding fewest that lacks it.
	r.ApplyMove(ctx, encodeMove(moveRec{kind: moveKindDone, group: 2, from: "d", to: "e", toID: 15}))
	f.groups[0].Replicas[2] = Replica{Name: "e", ID: 15}
	r.planMoves(ctx)
	if got := f.takeMoves(t); len(got) != 1 || got[0].group != 4 || got[0].to != "e" {
		t.Fatalf("after a move's end, proposed %+v, want group 4 from d to e (e holds 2 with its move in progress, b 3; a and c hold group 4)", got)
	}
}

// TestDrainBlockersNameWhatNoOtherReplicaCouldLead: a drain is refused for the groups (and
// the metadata group) whose other replicas are all drained or down.
func TestDrainBlockersNameWhatNoOtherReplicaCouldLead(t *testing.T) {
	f, r := newFakeRegion(t, []string{"a", "b", "c"}, []string{"a", "b", "e"}, []string{"b", "c", "d"})
	f.voters = []uint64{11, 12, 13} // a, b, c
	r.ApplyDrain(encodeDrain("b", drainReq{drained: true, at: 1}))
	f.down["c"] = true
	got := r.drainBlockers("a")
	want := []string{"the region's metadata group (no other voter is up and undrained)", "g2 (replicas a, b, c)"}
	if !slices.Equal(got, want) {
		t.Fatalf("blockers of a's drain: %q, want %q", got, want)
	}
	if got := r.drainBlockers("e"); len(got) != 0 {
		t.Fatalf("blockers of e's drain: %q, want none (a leads its group)", got)
	}
}
