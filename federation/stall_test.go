package federation

import (
	"log/slog"
	"testing"
	"time"
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
	waitFor(t, 10*time.Second, "both topics mirrored", func() bool {
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
	waitFor(t, 10*time.Second, "the stall reported", func() bool { return gauge("quicmq_mirror_stalled", stuck) == 1 })
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
	waitFor(t, 10*time.Second, "the lag in seconds to grow", func() bool {
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
	waitFor(t, 10*time.Second, "the recovery reported", func() bool {
		return gauge("quicmq_mirror_stalled", stuck) == 0 && len(a.logs.find(slog.LevelInfo, "mirror recovered from a stall")) == 1
	})
	pStuck.halt()
	pMoving.halt()
	for _, topic := range []string{stuck, moving} {
		last := int64(b.next(topic) - 1)
		waitFor(t, 10*time.Second, "caught up", func() bool { return a.cursor(t, "b", topic) == last })
		if got := checkMirrored(t, a, b, topic); got != int(last+1) {
			t.Fatalf("%s: %d records mirrored, want %d", topic, got, last+1)
		}
	}
	waitFor(t, 10*time.Second, "the lag back to 0", func() bool { return gauge("quicmq_mirror_lag_seconds", stuck) == 0 })
	if w := a.logs.find(slog.LevelWarn, "mirror stalled"); len(w) != 1 {
		t.Fatalf("%d WARN lines for one stall:%s", len(w), fmtRecords(w))
	}
}
