package federation

import (
	"fmt"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
)

// The origin's serving of one mirror stream is paused while records are published there:
// the mirroring node reports the mirror stalled (gauge, one WARN) within StallAfter, its lag
// in seconds against the origin's reported head grows meanwhile, and no record arrives; a
// second topic on the same link keeps flowing. Resumed, the mirror is reported recovered
// (gauge, INFO) and every record arrives exactly once.
func TestStalledMirrorIsReported(t *testing.T) {
	const stallAfter = 300 * time.Millisecond
	m := newFedMesh(t)
	a := m.addNode("a", nodeOpts{mirror: []string{"st.>"}, stallAfter: stallAfter})
	b := m.addNode("b", nodeOpts{})
	const stuck, moving = "st.stuck", "st.moving"
	b.publishSeq(t, stuck, 0, 10)
	b.publishSeq(t, moving, 0, 10)
	testlog.WaitFor(t, 10*time.Second, "both topics mirrored", func() bool {
		return a.cursor(t, "b", stuck) == 9 && a.cursor(t, "b", moving) == 9
	})
	labels := func(topic string) map[string]string { return map[string]string{"topic": topic, "origin_region": "b"} }
	gauge := func(name, topic string) float64 { return metricValue(t, a.registry(), name, labels(topic)) }
	if s := gauge("quicmq_mirror_stalled", stuck); s != 0 {
		t.Fatalf("stalled %v before the pause", s)
	}

	b.fedNow().pauseServing(stuck, true)
	pausedAt := time.Now()
	pStuck := startPublisher(t, b, stuck, 5, 10*time.Millisecond)
	pMoving := startPublisher(t, b, moving, 5, 10*time.Millisecond)
	testlog.WaitFor(t, 10*time.Second, "the stall reported", func() bool { return gauge("quicmq_mirror_stalled", stuck) == 1 })
	took := time.Since(pausedAt)
	// StallAfter, plus one head report and one check interval; the rest is slack for a
	// loaded machine.
	if took > stallAfter+2*time.Second {
		t.Fatalf("stall reported %v after the pause, StallAfter %v", took, stallAfter)
	}
	if w := a.logs.find(slog.LevelWarn, "mirror stalled"); len(w) != 1 {
		t.Fatalf("%d WARN lines for the stall, want 1:%s", len(w), fmtRecords(w))
	}
	lag1 := gauge("quicmq_mirror_lag_seconds", stuck)
	if lag1 <= 0 {
		t.Fatalf("lag %v s while stalled: must not be 0", lag1)
	}
	testlog.WaitFor(t, 10*time.Second, "the lag in seconds to grow", func() bool {
		return gauge("quicmq_mirror_lag_seconds", stuck) > lag1+0.1
	})
	if c := a.cursor(t, "b", stuck); c != 9 {
		t.Fatalf("the paused mirror moved to %d", c)
	}
	if s := gauge("quicmq_mirror_stalled", moving); s != 0 {
		t.Fatalf("the flowing topic reported stalled")
	}
	if c := a.cursor(t, "b", moving); c <= 9 {
		t.Fatalf("the other topic did not flow while one was paused: cursor %d", c)
	}
	t.Logf("stall reported %v after the pause (StallAfter %v); lag %.2f s then %.2f s",
		took.Round(time.Millisecond), stallAfter, lag1, gauge("quicmq_mirror_lag_seconds", stuck))

	b.fedNow().pauseServing(stuck, false)
	testlog.WaitFor(t, 10*time.Second, "the recovery reported", func() bool {
		return gauge("quicmq_mirror_stalled", stuck) == 0 && len(a.logs.find(slog.LevelInfo, "mirror recovered from a stall")) == 1
	})
	pStuck.halt()
	pMoving.halt()
	for _, topic := range []string{stuck, moving} {
		last := int64(b.next(topic) - 1)
		testlog.WaitFor(t, 10*time.Second, "caught up", func() bool { return a.cursor(t, "b", topic) == last })
		if got := checkMirrored(t, a, b, topic); got != int(last+1) {
			t.Fatalf("%s: %d records mirrored, want %d", topic, got, last+1)
		}
	}
	testlog.WaitFor(t, 10*time.Second, "the lag back to 0", func() bool { return gauge("quicmq_mirror_lag_seconds", stuck) == 0 })
	if w := a.logs.find(slog.LevelWarn, "mirror stalled"); len(w) != 1 {
		t.Fatalf("%d WARN lines for one stall:%s", len(w), fmtRecords(w))
	}
}

// mirrorHealth's decisions, step by step on a fake clock: behind only against a reported
// head, stalled after StallAfter without progress (not before), progress restarts the clock,
// caught up clears it, and the lag is in origin time once a record's time is known.
func TestMirrorHealthDecisions(t *testing.T) {
	const after = 10 * time.Second
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	sec := int64(time.Second)
	var h mirrorHealth
	type step struct {
		name    string
		do      func()
		now     int
		stalled bool
		changed bool
		lag     float64
	}
	steps := []step{
		{"nothing reported: not behind", func() {}, 0, false, false, 0},
		{"caught up at the head", func() { h.reported(10, 100*sec, at(0)); h.scanned(10, 100*sec, at(0)) }, 1, false, false, 0},
		{"the head moves: behind, not yet stalled", func() { h.reported(20, 105*sec, at(2)) }, 11, false, false, 5},
		{"StallAfter without progress: stalled", func() {}, 12, true, true, 5},
		{"still stalled: no change", func() { h.reported(30, 110*sec, at(13)) }, 13, true, false, 10},
		{"progress: not stalled, clock restarts", func() { h.scanned(25, 108*sec, at(14)) }, 14, false, true, 2},
		{"no progress again for StallAfter", func() {}, 24, true, true, 2},
		{"caught up: lag 0, not stalled", func() { h.scanned(30, 110*sec, at(25)) }, 25, false, true, 0},
	}
	for _, s := range steps {
		s.do()
		stalled, changed := h.check(at(s.now), after)
		lag, _ := h.lag(at(s.now))
		if stalled != s.stalled || changed != s.changed || lag != s.lag {
			t.Fatalf("%s: stalled %v changed %v lag %v, want %v %v %v", s.name, stalled, changed, lag, s.stalled, s.changed, s.lag)
		}
	}

	// Behind before any record's time is known: the lag is the time behind, by the local clock.
	var fresh mirrorHealth
	fresh.reported(5, 50*sec, at(0))
	if lag, _ := fresh.lag(at(3)); lag != 3 {
		t.Fatalf("fresh mirror behind for 3 s: lag %v", lag)
	}
}

// Twenty mirrors stalled at once are reported as a few lines per link and check, each with a
// count, the link's total and a few names, never a line per topic; the per-link gauge counts
// them all, and they recover in the same way.
func TestManyStallsOneLinePerCheck(t *testing.T) {
	const stallAfter, n = time.Second, 20
	m := newFedMesh(t)
	a := m.addNode("a", nodeOpts{mirror: []string{"st.>"}, stallAfter: stallAfter})
	b := m.addNode("b", nodeOpts{})
	name := func(i int) string { return fmt.Sprintf("st.t%02d", i) }
	for i := range n {
		b.publishSeq(t, name(i), 0, 3)
	}
	testlog.WaitFor(t, 10*time.Second, "every topic mirrored", func() bool {
		for i := range n {
			if a.cursor(t, "b", name(i)) != 2 {
				return false
			}
		}
		return true
	})
	for i := range n {
		b.fedNow().pauseServing(name(i), true)
	}
	for i := range n {
		b.publishSeq(t, name(i), 3, 5)
	}
	link := map[string]string{"peer_region": "b"}
	testlog.WaitFor(t, 10*time.Second, "every stall reported", func() bool {
		return metricValue(t, a.registry(), "quicmq_link_mirrors_stalled", link) == n
	})
	warns := a.logs.find(slog.LevelWarn, "mirror stalled")
	stalled := 0
	for _, w := range warns {
		w.Attrs(func(at slog.Attr) bool {
			if at.Key == "count" {
				stalled += int(at.Value.Int64())
			}
			return true
		})
	}
	// The stalls become due over a few checks (the publishes that start them are spread
	// over a few fsyncs): a line per check that found any, never one per topic.
	if stalled != n || len(warns) > n/4 {
		t.Fatalf("%d WARN lines counting %d stalls, want a few lines counting %d:%s", len(warns), stalled, n, fmtRecords(warns))
	}
	for i := range n {
		b.fedNow().pauseServing(name(i), false)
	}
	testlog.WaitFor(t, 10*time.Second, "every recovery reported", func() bool {
		return metricValue(t, a.registry(), "quicmq_link_mirrors_stalled", link) == 0
	})
	if infos := a.logs.find(slog.LevelInfo, "mirror recovered from a stall"); len(infos) > n/4 {
		t.Fatalf("%d INFO lines for %d recoveries:%s", len(infos), n, fmtRecords(infos))
	}
	for i := range n {
		testlog.WaitFor(t, 10*time.Second, "caught up", func() bool { return a.cursor(t, "b", name(i)) == 4 })
		checkMirrored(t, a, b, name(i))
	}
	t.Logf("%d stalls in %d WARN lines: %s", n, len(warns), fmtRecords(warns))
}

// A link keeps a mirrorHealth for every topic it mirrors, parked or not: with no pointer in
// it, the GC marks it without scanning it (issue 34's figure 3). time.Time holds one (its
// location), so local times are unix nanoseconds.
func TestMirrorHealthHoldsNoPointer(t *testing.T) {
	if p := pointerField(reflect.TypeFor[mirrorHealth](), "mirrorHealth"); p != "" {
		t.Fatalf("mirrorHealth holds a pointer: %s", p)
	}
}

// pointerField names a field of typ that holds a pointer ("" when none does).
func pointerField(typ reflect.Type, path string) string {
	switch typ.Kind() {
	case reflect.Struct:
		for i := range typ.NumField() {
			if p := pointerField(typ.Field(i).Type, path+"."+typ.Field(i).Name); p != "" {
				return p
			}
		}
		return ""
	case reflect.Array:
		return pointerField(typ.Elem(), path+"[]")
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return ""
	}
	return path + " (" + typ.String() + ")"
}
