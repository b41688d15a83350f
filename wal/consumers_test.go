package wal

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

func collectPositions(t *testing.T, l *Log, f PositionFilter) []PositionInfo {
	t.Helper()
	var out []PositionInfo
	if err := l.Positions(f, func(pi PositionInfo) bool { out = append(out, pi); return true }); err != nil {
		t.Fatalf("Positions(%+v): %v", f, err)
	}
	return out
}

func positionKeys(ps []PositionInfo) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name+"@"+p.Topic)
	}
	return out
}

func TestPositionsListAndDelete(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	l := openTestLog(t, dir, Options{Now: clock.Now})
	mustAppend(t, l, "a", 0, 10)
	mustAppend(t, l, "bb", 0, 10)
	set := func(name, topic string, v uint64) {
		t.Helper()
		if err := l.SetPosition(t.Context(), Position{Name: name, Topic: topic, Value: v}); err != nil {
			t.Fatal(err)
		}
	}
	set("tenant/x/w1", "a", 3)
	clock.Advance(time.Minute)
	set("tenant/x/w1", "bb", 4)
	set("tenant/x/w2", "a", 5)
	set("tenant/y/w1", "a", 6)
	set("mirror/eu", "bb", 7)

	all := collectPositions(t, l, PositionFilter{})
	want := []string{"mirror/eu@bb", "tenant/x/w1@bb", "tenant/x/w1@a", "tenant/x/w2@a", "tenant/y/w1@a"}
	slices.Sort(want)
	got := positionKeys(all)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("all positions = %v, want %v", got, want)
	}
	if got := positionKeys(collectPositions(t, l, PositionFilter{NamePrefix: "tenant/x/"})); len(got) != 3 {
		t.Errorf("tenant x: %v", got)
	}
	if got := positionKeys(collectPositions(t, l, PositionFilter{Topic: "a"})); len(got) != 3 {
		t.Errorf("topic a: %v", got)
	}
	w1 := collectPositions(t, l, PositionFilter{Name: "tenant/x/w1"})
	if len(w1) != 2 {
		t.Fatalf("w1: %+v", w1)
	}
	for _, p := range w1 {
		wantV := map[string]uint64{"a": 3, "bb": 4}[p.Topic]
		wantT := map[string]time.Time{"a": newFakeClock().Now(), "bb": newFakeClock().Now().Add(time.Minute)}[p.Topic]
		if !p.HasAcked || p.Acked != wantV || p.Resume != wantV+1 || !p.Updated.Equal(wantT) {
			t.Errorf("w1 on %s = %+v, want acked %d updated %v", p.Topic, p, wantV, wantT)
		}
	}
	// fn stops the walk.
	n := 0
	_ = l.Positions(PositionFilter{}, func(PositionInfo) bool { n++; return false })
	if n != 1 {
		t.Errorf("walk went on after false: %d calls", n)
	}

	removed, err := l.DeletePosition(t.Context(), "tenant/x/w1")
	if err != nil || removed != 2 {
		t.Fatalf("DeletePosition = %d %v", removed, err)
	}
	if removed, err := l.DeletePosition(t.Context(), "tenant/x/w1"); err != nil || removed != 0 {
		t.Errorf("DeletePosition again = %d %v", removed, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openTestLog(t, dir, Options{Now: clock.Now})
	if got := positionKeys(collectPositions(t, l, PositionFilter{NamePrefix: "tenant/x/"})); !slices.Equal(got, []string{"tenant/x/w2@a"}) {
		t.Errorf("after delete and reopen: %v", got)
	}
	if names := l.PositionNames("tenant/"); !slices.Equal(names, []string{"tenant/x/w2", "tenant/y/w1"}) {
		t.Errorf("PositionNames = %v", names)
	}
}

// TestPositionV1Readable: a position stored by the old layout (no time)
// still reads, and a new write replaces it with the new one.
func TestPositionV1Readable(t *testing.T) {
	dir := t.TempDir()
	l := openTestLog(t, dir, Options{})
	mustAppend(t, l, "a", 0, 3)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebbleLogger{testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	k := positionKey("a", "old")
	if err := db.Set(k, sealMeta(k, []byte{2, 0, 0, 0, 0, 0, 0, 0}), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	l = openTestLog(t, dir, Options{})
	if v, ok, err := l.Position("old", "a"); err != nil || !ok || v != 2 {
		t.Fatalf("v1 position = %d %v %v", v, ok, err)
	}
	ps := collectPositions(t, l, PositionFilter{Name: "old"})
	if len(ps) != 1 || !ps[0].Updated.IsZero() || ps[0].Resume != 3 {
		t.Errorf("v1 position listed as %+v", ps)
	}
	if err := l.SetPosition(t.Context(), Position{Name: "old", Topic: "a", Value: 2}); err != nil {
		t.Fatal(err)
	}
	if ps := collectPositions(t, l, PositionFilter{Name: "old"}); ps[0].Updated.IsZero() {
		t.Errorf("rewritten position has no time: %+v", ps)
	}
}

func TestResolveStartResetPending(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	l := openTestLog(t, dir, Options{Now: clock.Now})
	t0 := clock.Now()
	for i := range 10 {
		mustAppend(t, l, "a", i*10, 10)
		clock.Advance(time.Minute)
	}
	mustAppend(t, l, "b", 0, 5)
	if _, err := l.PurgeTopic(t.Context(), "b"); err != nil { // b: first 5, next 5
		t.Fatal(err)
	}
	mustAppend(t, l, "b", 5, 5)
	for _, c := range []struct {
		topic string
		s     Start
		want  uint64
	}{
		{"a", Start{Kind: StartEarliest}, 0},
		{"a", Start{Kind: StartLatest}, 100},
		{"a", Start{Kind: StartOffset, Offset: 42}, 42},
		{"a", Start{Kind: StartOffset, Offset: 100}, 100},
		{"a", Start{Kind: StartTime, Time: t0.Add(3*time.Minute + time.Second)}, 40},
		{"a", Start{Kind: StartTime, Time: t0.Add(time.Hour)}, 100},
		{"b", Start{Kind: StartEarliest}, 5},
	} {
		got, err := l.ResolveStart(c.topic, c.s)
		if err != nil || got != c.want {
			t.Errorf("ResolveStart(%s, %+v) = %d %v, want %d", c.topic, c.s, got, err, c.want)
		}
	}
	if _, err := l.ResolveStart("a", Start{Kind: StartOffset, Offset: 101}); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("offset past the head: %v", err)
	}
	if _, err := l.ResolveStart("b", Start{Kind: StartOffset, Offset: 2}); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Errorf("offset before the first: %v", err)
	}
	if _, err := l.ResolveStart("nope", Start{}); !errors.Is(err, ErrUnknownTopic) {
		t.Errorf("unknown topic: %v", err)
	}
	if _, err := l.ResolveStart("a", Start{Kind: 9}); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("unknown kind: %v", err)
	}

	topics := []string{"a", "b", "nope"}
	if total, per := l.Pending("w", topics); total != 100+5 || per[0].HasPosition || per[2].Known {
		t.Errorf("Pending without positions = %d %+v", total, per)
	}
	if err := l.SetPosition(t.Context(), Position{Name: "w", Topic: "a", Value: 89}); err != nil {
		t.Fatal(err)
	}
	if total, per := l.Pending("w", topics); total != 10+5 || per[0].Pending != 10 || per[0].Resume != 90 {
		t.Errorf("Pending = %d %+v", total, per)
	}
	// A reset to the earliest offset: nothing acknowledged, resume at 0.
	if err := l.ResetPositions(t.Context(), "w", map[string]uint64{"a": 0, "b": 7}); err != nil {
		t.Fatal(err)
	}
	check := func() {
		t.Helper()
		if r, ok, _ := l.Resume("w", "a"); !ok || r != 0 {
			t.Errorf("Resume after reset = %d %v", r, ok)
		}
		if _, ok, _ := l.Position("w", "a"); ok {
			t.Error("Position after a reset to 0 reports an acknowledged offset")
		}
		if v, ok, _ := l.Position("w", "b"); !ok || v != 6 {
			t.Errorf("Position after a reset to 7 = %d %v, want 6", v, ok)
		}
		if total, _ := l.Pending("w", topics); total != 100+3 {
			t.Errorf("Pending after reset = %d, want 103", total)
		}
	}
	check()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openTestLog(t, dir, Options{Now: clock.Now})
	check()
	// Retention past a position: the deleted records are not pending.
	mustSetRetention(t, l, "a", Retention{MaxAge: 5 * time.Minute})
	if err := l.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	if info := l.Topics()[0]; info.First == 0 {
		t.Fatalf("retention deleted nothing: %+v", info)
	} else if _, per := l.Pending("w", []string{"a"}); per[0].Pending != info.Records {
		t.Errorf("Pending past retention = %+v, want the %d retained records", per, info.Records)
	}
	if err := l.ResetPositions(t.Context(), "w", nil); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("reset of nothing: %v", err)
	}
	if _, err := l.DeleteTopic(t.Context(), "b"); err != nil {
		t.Fatal(err)
	}
	if err := l.ResetPositions(t.Context(), "w", map[string]uint64{"a": 1, "b": 1}); !errors.Is(err, ErrTopicDeleted) {
		t.Errorf("reset on a deleted topic: %v", err)
	}
	if r, _, _ := l.Resume("w", "a"); r != 0 {
		t.Errorf("a refused reset wrote a: resume %d", r)
	}
}

// BenchmarkPositions lists 10,000 positions (100 names on 100 topics each):
// all of them, one tenant's prefix, and one name (each a full pass over the
// position keys), and one topic's (a pass over that topic's keys only).
func BenchmarkPositions(b *testing.B) {
	l, _ := newTestLog(b, Options{})
	const names, topics = 100, 100
	for n := range names {
		resume := make(map[string]uint64, topics)
		for tp := range topics {
			resume[fmt.Sprintf("topic.%d", tp)] = uint64(n)
		}
		if err := l.ResetPositions(b.Context(), fmt.Sprintf("tenant/t%d/c%d", n%10, n), resume); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		f    PositionFilter
		want int
	}{
		{"all", PositionFilter{}, names * topics},
		{"prefix", PositionFilter{NamePrefix: "tenant/t3/"}, names / 10 * topics},
		{"name", PositionFilter{Name: "tenant/t3/c13"}, topics},
		{"topic", PositionFilter{Topic: "topic.7"}, names},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				n := 0
				if err := l.Positions(c.f, func(PositionInfo) bool { n++; return true }); err != nil || n != c.want {
					b.Fatalf("listed %d, want %d: %v", n, c.want, err)
				}
			}
		})
	}
}

// A listing of positions by name looks only at the names' positions, not at every position
// (issue 34: a node mirroring 10,000 topics holds a mirror cursor for each, and each metrics
// scrape listed the consumers over all of them): with 3,000 cursors of one name beside a few
// consumers, listing a tenant's allocates the same whatever the cursors (base: two strings per
// stored key), and every filter lists what the full walk lists, in the same order.
func TestPositionsByNameLookOnlyAtTheirNames(t *testing.T) {
	l := openTestLog(t, t.TempDir(), Options{})
	setPositions(t, l, 3000, func(i int) Position {
		return Position{Name: "mirror/eu", Topic: fmt.Sprintf("m.t%05d", i), Value: uint64(i)}
	})
	setPositions(t, l, 1, func(int) Position { return Position{Name: "d1", Topic: "m.t00007", Value: 1} })
	setPositions(t, l, 3, func(i int) Position {
		return Position{Name: "tenant/x/w", Topic: fmt.Sprintf("m.t%05d", 10*i), Value: 2}
	})
	// The cost, measured before the correctness checks below build the full walk.
	tenant := PositionFilter{NamePrefix: "tenant/x/"}
	allocs := testing.AllocsPerRun(5, func() {
		_ = l.Positions(tenant, func(PositionInfo) bool { return true })
	})
	if allocs > 100 {
		t.Errorf("listing a tenant's 3 positions beside 3,000 cursors allocates %.0f times: a walk of every position", allocs)
	}
	all := collectPositions(t, l, PositionFilter{})
	for _, f := range []PositionFilter{tenant, {Name: "d1"}, {SkipPrefix: "mirror/"}, {NamePrefix: "mirror/"}, {Name: "mirror/eu", SkipPrefix: "mirror/"}} {
		var want []PositionInfo
		for _, p := range all {
			if f.matchName(p.Name) {
				want = append(want, p)
			}
		}
		if got := collectPositions(t, l, f); !slices.Equal(positionKeys(got), positionKeys(want)) {
			t.Errorf("Positions(%+v) = %d positions %v..., want %d (the full walk's, in its order)", f, len(got), firstFew(positionKeys(got)), len(want))
		}
	}
	if got := l.PositionNames(""); !slices.Equal(got, []string{"d1", "mirror/eu", "tenant/x/w"}) {
		t.Errorf("PositionNames = %v", got)
	}
	if n, err := l.DeletePosition(t.Context(), "tenant/x/w"); err != nil || n != 3 {
		t.Fatalf("DeletePosition = %d, %v; want 3", n, err)
	}
	if got := collectPositions(t, l, PositionFilter{SkipPrefix: "mirror/"}); !slices.Equal(positionKeys(got), []string{"d1@m.t00007"}) {
		t.Errorf("after the delete: %v", positionKeys(got))
	}
}

// setPositions stores n positions made by pos, 32 at a time (the log's group commit).
func setPositions(t *testing.T, l *Log, n int, pos func(i int) Position) {
	t.Helper()
	next := make(chan int)
	errs := make(chan error, 32)
	for range 32 {
		go func() {
			var first error
			for i := range next {
				if err := l.SetPosition(t.Context(), pos(i)); err != nil && first == nil {
					first = err
				}
			}
			errs <- first
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	for range 32 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func firstFew(s []string) []string { return s[:min(len(s), 5)] }
