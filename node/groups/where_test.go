package groups

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/replica"
	"github.com/quicmq/quicmq/wal"
)

// fakeRaft is a Raft whose replicated topics are those of replicated; it records what it
// was asked to store and to barrier.
type fakeRaft struct {
	replicated map[string]bool
	leader     map[string]string // LeadsElsewhere's answer by topic
	mu         sync.Mutex
	stored     []string // "topic home"
	barriers   []string
	appended   []string
}

func (f *fakeRaft) IsReplicated(topic string) bool { return f.replicated[topic] }
func (f *fakeRaft) StoreState(_ context.Context, _, topic string, op *replica.GroupOp, home bool) *wire.Error {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := "wild"
	if home {
		h = "home"
	}
	if op.Settings == nil || op.State == nil {
		return wire.Errorf(wire.CodeInternal, "store of %q without settings or state", topic)
	}
	f.stored = append(f.stored, topic+" "+h)
	return nil
}
func (f *fakeRaft) Barrier(_ context.Context, _, topic string) *wire.Error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.barriers = append(f.barriers, topic)
	return nil
}
func (f *fakeRaft) LeadsElsewhere(topic string) string { return f.leader[topic] }
func (f *fakeRaft) Append(_ context.Context, topic string, _ []wal.Record) *wire.Error {
	f.appended = append(f.appended, topic)
	return nil
}
func (f *fakeRaft) Placed() <-chan struct{} { return nil }

// TestReplicatedSplitsByTopic: a store sends each replicated topic's state to its raft group
// (home only for the group's own literal topic) and the rest to the node's log; a barrier
// covers the replicated topics of a pattern only, and none for a group live here; a group
// moved only when its literal, replicated topic is led elsewhere; dead letters to a topic of
// the node's log stay there.
func TestReplicatedSplitsByTopic(t *testing.T) {
	l, err := wal.Open(t.TempDir(), wal.Options{Logger: slog.New(slog.DiscardHandler), RetentionInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	for _, topic := range []string{"a.local", "a.repl", "b.repl", "dlq"} {
		if res := l.Append(ctx, wal.AppendRequest{Topic: topic, Records: []wal.Record{{Payload: []byte("x")}}}); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	f := &fakeRaft{replicated: map[string]bool{"a.repl": true, "b.repl": true}, leader: map[string]string{"b.repl": "eu-2"}}
	live := map[string]bool{"live": true}
	r := Replicated{Wal: l, Raft: f, Region: "eu", Live: func(name string) bool { return live[name] }}

	set := &wal.GroupSettings{Pattern: "a.repl"}
	st := func() *wal.GroupState { return &wal.GroupState{Floor: 1, Next: 1} }
	states := []wal.TopicGroupState{{Topic: "a.local", State: st()}, {Topic: "a.repl", State: st()}, {Topic: "b.repl", State: st()}}
	if err := r.Store(ctx, "g", set, states); err != nil {
		t.Fatal(err)
	}
	slices.Sort(f.stored)
	if want := []string{"a.repl home", "b.repl wild"}; !slices.Equal(f.stored, want) {
		t.Errorf("raft stores %v, want %v", f.stored, want)
	}
	if _, got, _, err := l.Group("g"); err != nil || got["a.local"] == nil || got["a.repl"] != nil || got["b.repl"] != nil {
		t.Errorf("the log holds %v (%v): want a.local's state alone", got, err)
	}

	if e := r.Barrier(ctx, "g", "*.repl"); e != nil {
		t.Fatal(e)
	}
	if e := r.Barrier(ctx, "live", "a.repl"); e != nil {
		t.Fatal(e)
	}
	slices.Sort(f.barriers)
	if want := []string{"a.repl", "b.repl"}; !slices.Equal(f.barriers, want) {
		t.Errorf("barriers on %v, want %v (none for a live group, none on a.local)", f.barriers, want)
	}

	for _, c := range []struct {
		pattern string
		moved   bool
	}{{"b.repl", true}, {"a.repl", false}, {"a.local", false}, {"*.repl", false}} {
		g := &Group{shown: "g", set: wal.GroupSettings{Pattern: c.pattern}}
		if e := r.Moved(g); (e != nil) != c.moved || e != nil && e.Code != wire.CodeUnavailable {
			t.Errorf("Moved of a group over %q: %v, want moved %v", c.pattern, e, c.moved)
		}
	}

	if err := r.AppendDeadLetter(ctx, "dlq", []wal.Record{{Payload: []byte("d")}}); err != nil {
		t.Fatal(err)
	}
	if err := r.AppendDeadLetter(ctx, "new.dlq", []wal.Record{{Payload: []byte("d")}}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"new.dlq"}; !slices.Equal(f.appended, want) {
		t.Errorf("raft appends to %v, want %v (a topic of the node's log stays there)", f.appended, want)
	}
}
