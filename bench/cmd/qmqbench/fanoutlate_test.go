package main

import (
	"testing"
	"time"
)

func TestLateShare(t *testing.T) {
	// Median 2 ms; with a 25 ms one-way delay the threshold is 2 + 50 = 52 ms.
	lat := []float64{1, 2, 2, 2, 3, 52, 60, 200}
	share, th := lateShare(lat, 25*time.Millisecond)
	if th != 52 {
		t.Errorf("threshold %v ms, want 52", th)
	}
	if share != 2.0/8 {
		t.Errorf("share %v, want 2/8 (52 is not more than the threshold)", share)
	}
	// Without added delay the round trip is lateMinRTT: 2 + 1 = 3 ms.
	if share, th := lateShare(lat, 0); th != 3 || share != 3.0/8 {
		t.Errorf("no delay: share %v threshold %v, want 3/8 and 3", share, th)
	}
	if share, th := lateShare(nil, 0); share != 0 || th != 0 {
		t.Errorf("empty: %v %v", share, th)
	}
}
