package groups

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/quicmq/quicmq/federation"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/wal"
)

// learnedRig is a group over "t.>" on a log of topics whose records come from three origins
// ("eu", this region, and "us", "ap", mirrored): it hands records out, has the member note
// their origins (Learned) or not, acknowledges, stores and restarts, as a seeded schedule
// says, and checks every stored state's vector against the records it appended.
type learnedRig struct {
	t      *testing.T
	rng    *rand.Rand
	dir    string
	l      *wal.Log
	g      *Group
	m      *Member
	recs   map[string][]wal.OriginRef // topic -> the origin of each offset
	next   map[string]uint64          // origin -> its next origin offset
	out    []Taken                    // handed out, not acknowledged
	late   [][]Taken                  // handed out, origins noted only after a store (a member slower than the store)
	stores int
	// kept is each stored vector's Through with a copy of it when stored: one taken for a
	// store must not change after it (a replicated store may encode it later).
	kept []keptVector
}

type keptVector struct {
	topic     string
	have, was map[string]uint64
}

func (r *learnedRig) open() {
	r.t.Helper()
	l, err := wal.Open(r.dir, wal.Options{Logger: slog.New(slog.DiscardHandler), RetentionInterval: -1})
	if err != nil {
		r.t.Fatal(err)
	}
	r.l = l
	env := &Env{Wal: l, Log: slog.New(slog.DiscardHandler), Region: "eu", Cfg: Config{Window: 64}}
	env.Cfg.WithDefaults()
	env.Where = storeFunc{SingleCopy{Wal: l}, func(ctx context.Context, name string, set *wal.GroupSettings, states []wal.TopicGroupState) error {
		r.stores++
		for _, ts := range states {
			r.check(ts.Topic, ts.State)
			r.kept = append(r.kept, keptVector{ts.Topic, ts.State.Vector.Through, maps.Clone(ts.State.Vector.Through)})
		}
		return l.SetGroupStates(ctx, name, set, states)
	}}
	env.Mirrored = func(string) map[string][]*wal.GroupState { return nil }
	g, e := New(env, "g", "g", &wire.Subscribe{Pattern: "t.>", Start: wire.StartEarliest}, wal.GroupSettings{Pattern: "t.>", AckWait: time.Hour})
	if e != nil {
		r.t.Fatal(e)
	}
	r.g, r.m = g, &Member{id: "m", end: func(*wire.Error) {}}
	g.Join(r.m)
}

// restart stores, ends the group and reopens the log: what was outstanding is handed out again.
func (r *learnedRig) restart() {
	r.t.Helper()
	r.store()
	r.g.Leave(r.m)
	if err := r.l.Close(); err != nil {
		r.t.Fatal(err)
	}
	r.out, r.late = nil, nil
	r.open()
}

// appendRun appends 1-4 records of one origin to topic.
func (r *learnedRig) appendRun(topic string) {
	origin := []string{"eu", "us", "ap"}[r.rng.IntN(3)]
	req := wal.AppendRequest{Topic: topic}
	for range 1 + r.rng.IntN(4) {
		rec := wal.Record{Payload: []byte("x")}
		if origin != "eu" {
			rec.OriginRegion, rec.OriginOffset = origin, r.next[origin]
			r.next[origin]++
		}
		req.Records = append(req.Records, rec)
	}
	if origin != "eu" {
		req.Position = &wal.Position{Name: federation.CursorPrefix + origin, Topic: topic, Value: r.next[origin] - 1}
	}
	res := r.l.Append(context.Background(), req)
	if res.Err != nil {
		r.t.Fatal(res.Err)
	}
	for i, rec := range req.Records {
		ref := wal.OriginRef{Region: origin, Offset: rec.OriginOffset}
		if origin == "eu" {
			ref.Offset = res.First + uint64(i)
		}
		r.recs[topic] = append(r.recs[topic], ref)
	}
}

// take hands out up to 8 records; the member notes the origins of some of them (a record it
// could not read is noted with none), now or after the next store.
func (r *learnedRig) take() {
	got, _ := r.g.Take(r.m, 1+r.rng.IntN(8))
	r.out = append(r.out, got...)
	if r.rng.IntN(5) == 0 {
		r.late = append(r.late, slices.Clone(got)) // got is Take's until its next call
		return
	}
	r.learn(got)
}

func (r *learnedRig) learn(fs []Taken) {
	refs := make([]wal.OriginRef, len(fs))
	for i, f := range fs {
		if r.rng.IntN(6) > 0 {
			refs[i] = r.recs[f.Topic()][f.Offset()]
		}
	}
	r.g.Learned(fs, refs)
}

func (r *learnedRig) ack() {
	for i := 0; i < len(r.out); i++ {
		if r.rng.IntN(3) == 0 {
			f := r.out[i]
			if err := r.g.Ack(r.m, f.Topic(), f.Offset()); err != nil {
				r.t.Fatal(err)
			}
			r.out = append(r.out[:i], r.out[i+1:]...)
			i--
		}
	}
}

func (r *learnedRig) store() {
	r.t.Helper()
	if err := r.g.Store(context.Background()); err != nil {
		r.t.Fatal(err)
	}
	for _, fs := range r.late {
		r.learn(fs)
	}
	r.late = nil
}

// check compares a state's vector with the records appended: Through is the highest origin
// offset of each origin below Next, and each entry's origin is its record's.
func (r *learnedRig) check(topic string, st *wal.GroupState) {
	r.t.Helper()
	if st.Vector == nil {
		r.t.Fatalf("store %d: %s stored without a vector: %+v", r.stores, topic, st)
	}
	want := map[string]uint64{}
	for _, ref := range r.recs[topic][:st.Next] {
		want[ref.Region] = max(want[ref.Region], ref.Offset)
	}
	if !maps.Equal(st.Vector.Through, want) {
		r.t.Fatalf("store %d: %s next %d: vector %v, the records' %v", r.stores, topic, st.Next, st.Vector.Through, want)
	}
	for _, e := range st.Entries {
		if e.Origin != r.recs[topic][e.Offset] {
			r.t.Fatalf("store %d: %s@%d stored with origin %v, the record's %v", r.stores, topic, e.Offset, e.Origin, r.recs[topic][e.Offset])
		}
	}
}

// TestGroupVectorFromLearnedOrigins: the vector a group stores from the origins its member
// noted as it handed records out (with some not noted, some noted only after a store, and
// restarts that hand outstanding records out again) is the one the records give, as a
// re-read of them gives it. Seeded schedules, printed.
func TestGroupVectorFromLearnedOrigins(t *testing.T) {
	for i := range 4 {
		seed := uint64(time.Now().UnixNano()) + uint64(i)
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Logf("seed %d", seed)
			r := &learnedRig{t: t, rng: rand.New(rand.NewPCG(seed, seed)), dir: filepath.Join(t.TempDir(), "log"),
				recs: map[string][]wal.OriginRef{}, next: map[string]uint64{}}
			r.open()
			topics := []string{"t.a", "t.b", "t.c", "t.d"}
			for step := range 400 {
				switch k := r.rng.IntN(20); {
				case k < 6:
					r.appendRun(topics[r.rng.IntN(len(topics))])
				case k < 11:
					r.take()
				case k < 15:
					r.ack()
				case k < 19:
					r.store()
				case step > 50:
					r.restart()
				}
			}
			r.restart()
			if r.stores == 0 {
				t.Fatal("nothing stored")
			}
			for i, k := range r.kept {
				if !maps.Equal(k.have, k.was) {
					t.Fatalf("the vector of %s stored %d-th changed after its store: %v, stored %v", k.topic, i, k.have, k.was)
				}
			}
			r.g.Leave(r.m)
			r.l.Close()
		})
	}
}

// storeFunc is SingleCopy with its Store replaced by store.
type storeFunc struct {
	SingleCopy
	store func(ctx context.Context, name string, set *wal.GroupSettings, states []wal.TopicGroupState) error
}

func (s storeFunc) Store(ctx context.Context, name string, set *wal.GroupSettings, states []wal.TopicGroupState) error {
	return s.store(ctx, name, set, states)
}
