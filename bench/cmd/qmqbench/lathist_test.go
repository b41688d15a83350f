package main

import (
	"math"
	"testing"
)

func TestLatHist(t *testing.T) {
	var h latHist
	for i := 1; i <= 1000; i++ {
		h.add(int64(i) * 1e6) // 1 ms .. 1000 ms
	}
	for _, c := range []struct{ q, want float64 }{{0.5, 500}, {0.99, 990}, {0.001, 1}} {
		if got := h.quantile(c.q, 0); math.Abs(got-c.want)/c.want > 0.02 {
			t.Errorf("q%v = %.2f ms, want %v within 2%%", c.q, got, c.want)
		}
	}
	// 1000 of 1010 expected arrived: the p99 rank (1000) is still a real latency, the p999
	// rank falls among the missing ones.
	if got := h.quantile(0.99, 1010); math.IsInf(got, 1) || got > 1000*1.02 {
		t.Errorf("p99 with 10 missing = %v", got)
	}
	if got := h.quantile(0.999, 1010); !math.IsInf(got, 1) {
		t.Errorf("p999 with 10 of 1010 missing = %v, want +Inf", got)
	}
	var e latHist
	if e.quantile(0.99, 0) != 0 {
		t.Error("empty histogram: want 0")
	}
	e.add(-5) // clock step: clamped into the first bucket, not a panic
	if e.count() != 1 {
		t.Error("negative latency not counted")
	}
}
