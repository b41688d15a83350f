package main

import (
	"slices"
	"testing"
	"time"
)

// GC end times fall in the warm-up (-1), in a second of the window, or outside the run
// (left out); a run's seconds with a GC are told from those without.
func TestHeteroGCSeconds(t *testing.T) {
	start := time.Unix(1000, 0)
	winStart, winEnd := start.Add(time.Second), start.Add(4*time.Second)
	at := func(d time.Duration) uint64 { return uint64(start.Add(d).UnixNano()) }
	ends := []uint64{0, at(-time.Millisecond), at(500 * time.Millisecond), at(2500 * time.Millisecond), at(1100 * time.Millisecond), at(4 * time.Second)}
	if got := gcSeconds(ends, start, winStart, winEnd); !slices.Equal(got, []int{-1, 0, 1}) {
		t.Fatalf("gcSeconds: %v, want [-1 0 1]", got)
	}
	res := hetResult{CleanP99PerSecond: []float64{9, 2, 3, 4, -1}, NodeGCSeconds: []int{-1, 0}, WorkerGCSeconds: []int{0}}
	if with, without := res.gcSplit(); with != 9 || without != 3 {
		t.Fatalf("gcSplit: %v with a GC, %v without; want 9 and 3", with, without)
	}
}

// The machine's busy and stolen shares come from the ticks between two reads of /proc/stat.
func TestHeteroMachineShares(t *testing.T) {
	a, b := machineTicks{total: 1000, idle: 400, steal: 10}, machineTicks{total: 1200, idle: 450, steal: 30}
	if busy, steal := a.to(b); busy != 75 || steal != 10 {
		t.Fatalf("busy %v%%, stolen %v%%; want 75 and 10", busy, steal)
	}
	if m := parseMachineTicks("cpu  100 0 50 800 20 0 10 20 0 0"); m != (machineTicks{total: 1000, idle: 820, steal: 20}) {
		t.Fatalf("parsed %+v, want total 1000, idle 820, steal 20", m)
	}
	if m := readMachineTicks(); m.total == 0 || m.idle > m.total {
		t.Fatalf("/proc/stat: %+v", m)
	}
}

// A record is placed in the window's seconds by its send time alone, clamped to the window.
func TestHeteroSecondOf(t *testing.T) {
	const s = int64(time.Second)
	from := int64(5 * s)
	for _, c := range []struct {
		sent int64
		want int
	}{{from, 0}, {from + s - 1, 0}, {from + s, 1}, {from + 19*s + s/2, 19}, {from + 20*s, 19}, {from - 1, 0}} {
		if got := secondOf(c.sent, from, 20); got != c.want {
			t.Errorf("secondOf(from%+d ns): %d, want %d", c.sent-from, got, c.want)
		}
	}
}
