package main

import (
	"testing"
	"time"
)

func TestLateShare(t *testing.T) {
	lat := []float64{1, 2, 2, 2, 3, 52, 60, 200}
	// Median 2 ms; with a 25 ms one-way delay the threshold is 2 + 50 = 52 ms.
	if th := lateThreshold(2, 25*time.Millisecond); th != 52 {
		t.Errorf("threshold %v ms, want 52", th)
	}
	if share := lateShare(lat, 52); share != 2.0/8 {
		t.Errorf("share %v, want 2/8 (52 is not more than the threshold)", share)
	}
	// Without added delay the round trip is lateMinRTT: 2 + 1 = 3 ms.
	if th := lateThreshold(2, 0); th != 3 {
		t.Errorf("no delay: threshold %v, want 3", th)
	}
	if share := lateShare(lat, 3); share != 3.0/8 {
		t.Errorf("no delay: share %v, want 3/8", share)
	}
	if share := lateShare(nil, 0); share != 0 {
		t.Errorf("empty: %v", share)
	}
}

// TestLateThresholdShared: a system whose median rose with its records held behind losses
// (the shared stream) is counted against the other system's median plus a round trip, at its
// own loss rate and repeat only; a result without latencies (an older file) keeps its figures.
func TestLateThresholdShared(t *testing.T) {
	d := 25 * time.Millisecond
	mk := func(sys string, loss float64, rep int, lat ...float64) *runResult {
		r := &runResult{Repeat: rep, Lat: lat}
		r.System, r.Loss, r.Delay = sys, loss, d
		r.P50 = lat[(len(lat)-1)/2]
		return r
	}
	q := mk("quicmq", 0.02, 1, 26, 27, 27, 80, 90)    // median 27: threshold 77
	a := mk("ablation", 0.02, 1, 27, 40, 45, 78, 100) // own median 45 would give 95
	other := mk("ablation", 0.02, 2, 60, 61, 62, 63, 200)
	old := &runResult{Late: 0.5, LateMs: 99}
	old.System, old.Loss = "quicmq", 0.02
	shareLateThresholds([]*runResult{q, a, other, old})
	if q.LateMs != 77 || a.LateMs != 77 {
		t.Fatalf("thresholds %v, %v ms, want 77 for both", q.LateMs, a.LateMs)
	}
	if q.Late != 2.0/5 || a.Late != 2.0/5 {
		t.Errorf("late %v, %v, want 2/5 each (78 and 100 above 77 for the ablation)", q.Late, a.Late)
	}
	if other.LateMs != 112 || other.Late != 1.0/5 {
		t.Errorf("repeat 2 alone: threshold %v late %v, want 112 and 1/5", other.LateMs, other.Late)
	}
	if old.Late != 0.5 || old.LateMs != 99 {
		t.Errorf("a result without latencies changed: %v %v", old.Late, old.LateMs)
	}
}
