package groups

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/wal"
)

// TestWildcardGroupAllocationsPerTopic counts the heap allocations of a group over a wildcard
// of many topics of one record each (issue 35): its join, then handing out, noting, acknowledging
// and storing every record, as a member does. The bounds are per topic, with room for the
// log's own work; before the compact per-topic state (outSet, the tracker in the gtopic, a
// shared empty vector, the store's states in one array, the learned origins in a shared
// array, the encoding into reused buffers) the
// join took 3.0 and the replay 17.3 a topic (aadcccf); with them 1.0 and 4.6 (5.6 with a
// slice allocated per topic for its learned origins); with the one-origin vectors shared
// (vecCache) and the origins of outstanding records in slices, 1.0 and 3.5 (be81b61: 4.6).
func TestWildcardGroupAllocationsPerTopic(t *testing.T) {
	const topics = 3000
	env := newWildEnv(t, topics)
	mallocs := func() uint64 {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.Mallocs
	}

	m0 := mallocs()
	g, m := joinWild(t, env, "g")
	join := float64(mallocs()-m0) / topics
	m1 := mallocs()
	replayWild(t, g, m, topics)
	replay := float64(mallocs()-m1) / topics
	t.Logf("allocations a topic: join %.1f, replay %.1f", join, replay)
	if join > 2 {
		t.Errorf("joining a group over %d topics allocated %.1f times a topic, want at most 2", topics, join)
	}
	if replay > 4 {
		t.Errorf("handing out, acknowledging and storing a record of each of %d topics allocated %.1f times a topic, want at most 4", topics, replay)
	}
	_, states, _, err := env.Wal.Group("g")
	if err != nil {
		t.Fatal(err)
	}
	for i := range topics {
		st := states[fmt.Sprintf("w.%d", i)]
		if st == nil || st.Floor != 1 || st.Next != 1 || len(st.Entries) != 0 || st.Vector == nil || st.Vector.Through["eu"] != 0 {
			t.Fatalf("w.%d stored as %+v, want floor and next 1, nothing outstanding, through eu 0", i, st)
		}
	}
}

// BenchmarkWildcardGroupReplay is the group's own part of a replay over a wildcard of
// QUICMQ_BENCH_GROUP_WILD_TOPICS (default 20,000) topics of one record each, with no stream:
// a new group's join, then handing out, noting, acknowledging and storing every record as a
// member does (64 at a time, a store after each batch). It reports the process's CPU per
// topic (the log's goroutines included), steadier than the time on a loaded machine.
//
//	go test -run '^$' -bench WildcardGroupReplay -benchtime 3x ./node/groups
func BenchmarkWildcardGroupReplay(b *testing.B) {
	topics := 20_000
	if v := os.Getenv("QUICMQ_BENCH_GROUP_WILD_TOPICS"); v != "" {
		var err error
		if topics, err = strconv.Atoi(v); err != nil || topics < 1 {
			b.Fatalf("QUICMQ_BENCH_GROUP_WILD_TOPICS=%q: want a positive number", v)
		}
	}
	env := newWildEnv(b, topics)
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var joined, replayed time.Duration
	i := 0
	for b.Loop() {
		i++
		c0 := cpu()
		g, m := joinWild(b, env, "g"+strconv.Itoa(i))
		c1 := cpu()
		replayWild(b, g, m, topics)
		c2 := cpu()
		g.Leave(m)
		joined += c1 - c0
		replayed += c2 - c1
	}
	b.ReportMetric(float64(joined.Nanoseconds())/float64(topics*b.N), "join-cpu-ns/topic")
	b.ReportMetric(float64(replayed.Nanoseconds())/float64(topics*b.N), "replay-cpu-ns/topic")
}

// newWildEnv is a log of topics "w.0", "w.1", ... of one record each, and an Env over it
// whose stores go to the log.
func newWildEnv(tb testing.TB, topics int) *Env {
	tb.Helper()
	l, err := wal.Open(tb.TempDir(), wal.Options{Logger: slog.New(slog.DiscardHandler), RetentionInterval: -1})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	done := make(chan error, topics)
	for i := range topics {
		l.AppendAsync(wal.AppendRequest{Topic: fmt.Sprintf("w.%d", i), Records: []wal.Record{{Payload: []byte("x")}}},
			func(r wal.AppendResult) { done <- r.Err })
	}
	for range topics {
		if err := <-done; err != nil {
			tb.Fatal(err)
		}
	}
	env := &Env{Wal: l, Log: slog.New(slog.DiscardHandler), Region: "eu", Cfg: Config{Window: 1024, MemberPending: 1024}}
	env.Cfg.WithDefaults()
	env.Where = SingleCopy{Wal: l}
	env.Mirrored = func(string) map[string][]*wal.GroupState { return nil }
	return env
}

// joinWild makes a new group named name over "w.>" from earliest, with one member.
func joinWild(tb testing.TB, env *Env, name string) (*Group, *Member) {
	tb.Helper()
	g, e := New(env, name, name, &wire.Subscribe{Pattern: "w.>", Start: wire.StartEarliest}, wal.GroupSettings{Pattern: "w.>", AckWait: time.Hour})
	if e != nil {
		tb.Fatal(e)
	}
	m := &Member{id: "m", end: func(*wire.Error) {}}
	g.Join(m)
	return g, m
}

// replayWild hands out, notes, acknowledges and stores the group's records (topics of them)
// as a member does: 64 at a time, a store after each batch.
func replayWild(tb testing.TB, g *Group, m *Member, topics int) {
	tb.Helper()
	ctx := context.Background()
	refs := make([]wal.OriginRef, 0, 64)
	done := 0
	for done < topics {
		got, _ := g.Take(m, 64)
		if len(got) == 0 {
			tb.Fatalf("nothing to take after %d of %d", done, topics)
		}
		refs = refs[:0]
		for _, f := range got { // this region's records: each its own origin offset 0
			refs = append(refs, wal.OriginRef{Region: "eu", Offset: f.Offset()})
		}
		g.Learned(got, refs)
		for _, f := range got {
			if err := g.AckAt(m, f.Index, f.Offset()); err != nil {
				tb.Fatal(err)
			}
		}
		if err := g.Store(ctx); err != nil {
			tb.Fatal(err)
		}
		done += len(got)
	}
}

// TestOutSetAgainstMap: a topic's outstanding records (outSet) agree with a map of them
// through a seeded run of puts and deletions in and out of offset order.
func TestOutSetAgainstMap(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	var o outSet
	ref := map[uint64]*Flight{}
	next := uint64(0)
	for range 20000 {
		switch k := rng.IntN(10); {
		case k < 4: // handed out: the next offset
			f := &Flight{off: next}
			next++
			o.put(f)
			ref[f.off] = f
		case k < 5 && next > 0: // restored or replaced at any offset
			f := &Flight{off: rng.Uint64N(next)}
			o.put(f)
			ref[f.off] = f
		case k < 8 && len(o.all()) > 0: // acknowledged in order
			off := o.all()[0].off
			o.del(off)
			delete(ref, off)
		case next > 0: // acknowledged out of order, or not outstanding
			off := rng.Uint64N(next)
			o.del(off)
			delete(ref, off)
		}
		if o.len() != len(ref) {
			t.Fatalf("len %d, want %d", o.len(), len(ref))
		}
		if !slices.IsSortedFunc(o.all(), func(a, b *Flight) int { return cmp.Compare(a.off, b.off) }) {
			t.Fatal("not ascending")
		}
		if next > 0 {
			off := rng.Uint64N(next + 1)
			if o.get(off) != ref[off] {
				t.Fatalf("get(%d) = %v, want %v", off, o.get(off), ref[off])
			}
			low, ok := o.from(off)
			want, wantOK := uint64(0), false
			for k := range ref {
				if k >= off && (!wantOK || k < want) {
					want, wantOK = k, true
				}
			}
			if low != want || ok != wantOK {
				t.Fatalf("from(%d) = %d %v, want %d %v", off, low, ok, want, wantOK)
			}
		}
	}
}
