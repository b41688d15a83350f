package node

import (
	"context"
	"os"
	"runtime"
	rtmetrics "runtime/metrics"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
)

// liveAfterOneGC is the live heap that one collection keeps: what a node's next collection
// after a catch-up still marks and sizes its heap goal by (a sync.Pool's contents survive one
// collection and go at the second).
func liveAfterOneGC() uint64 {
	runtime.GC()
	s := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	rtmetrics.Read(s)
	return s[0].Value.Uint64()
}

// catchUpIdleTopics starts two regions of one node each mirroring idle.> with the default
// stream bound, creates n topics at "idle" and waits until "hot" holds them and every mirror
// parked. It returns the live heap after one collection before the topics, and the most
// mirror streams seen open at hot.
func catchUpIdleTopics(t *testing.T, n int) (before uint64, most int) {
	t.Helper()
	m := newTestMeshWith(t, func(_ string, c *Config) { c.Mirror = []string{"idle.>"} }, "hot", "idle")
	hot, idle := m.nodes["hot"], m.nodes["idle"]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	before = liveAfterOneGC()
	createIdleTopics(ctx, t, idle, "idle", n)
	return before, waitIdleMirrored(t, hot, idle, n)
}

// TestCatchupLeavesNoHeap: once a catch-up of many topics ends (every mirror parked), the
// next collection keeps what the parked topics cost and not the catch-up's streams. Two
// regions of one node each mirror idle.> with the default stream bound (1,024): N topics
// created at "idle" are caught up at "hot" over hundreds of streams at once. The live heap
// the first collection after it keeps, per topic over both nodes, is bounded. Before the
// mirror feeds' read buffers were bounded by the feeds open (federation/mapping.go), a
// sync.Pool kept a 16 KiB buffer for each stream of the most ever open at once until the
// second collection: an idle node's heap 15 MiB larger after 10,000 topics (issue 34).
func TestCatchupLeavesNoHeap(t *testing.T) {
	if raceEnabled {
		t.Skip("a heap measurement: the race detector's shadow memory and slower catch-up blur it")
	}
	const n = 3000
	profile := os.Getenv("QUICMQ_CATCHUP_HEAP") // FILE: heap profiles after one and two collections, FILE.1 and FILE.2
	writeProfile := heapProfileWriter(t, profile)
	before, most := catchUpIdleTopics(t, n)
	one := liveAfterOneGC()
	writeProfile(profile + ".1")
	two := liveAfterOneGC()
	writeProfile(profile + ".2")
	perTopic := (float64(one) - float64(before)) / n
	t.Logf("%d topics caught up over at most %d streams at once; live heap after the catch-up, per topic over both nodes: %.0f B after one collection, %.0f B after two",
		n, most, perTopic, (float64(two)-float64(before))/n)
	if most < 64 {
		t.Fatalf("the catch-up held at most %d streams at once (as polled): too few to show what it leaves", most)
	}
	// A parked mirrored topic costs about 1.1 KiB over both nodes (TestIdleMirroredTopicHeap),
	// and a catch-up over 1,024 streams leaves Go's goroutine records (never freed) and maps
	// sized for its streams: 1.7-2.4 KiB a topic of 3,000 after two collections, 1.8-3.6 after
	// one (quic-go's own pools); with a sync.Pool of feed buffers, 5.0-8.9 after one.
	const bound = 4300
	if perTopic > bound {
		t.Fatalf("the first collection after the catch-up kept %.0f B per topic over both nodes (bound %d): the catch-up's streams left heap behind", perTopic, bound)
	}
}

// TestCatchupReleasesItsHeap: a catch-up's garbage does not outlive it. A catch-up of many
// topics allocates tens of KiB per stream it opens and sets the heap goal by its peak (twice
// what a collection in its middle found live, the hundreds of streams open then); an idle
// node allocates a few KiB a second, so without a collection after it that garbage stays
// until Go's forced collection two minutes later: qmqbench hetero's node under test began
// its window with 14-56 MiB in its heap against 7-8 without the idle topics, and figure
// 1's eu showed 2.09x the RSS of a node without mirroring 10 s after its catch-up (issue 34).
// Two regions of one node each mirror idle.>; N topics created at "idle" are caught up at
// "hot" over hundreds of streams. Within a few seconds of every mirror parked (nothing
// allocating meanwhile but the nodes' keep-alives and this poll), the heap's allocated
// bytes per topic over both nodes, live or not yet collected, are bounded.
func TestCatchupReleasesItsHeap(t *testing.T) {
	if raceEnabled {
		t.Skip("a heap measurement: the race detector's shadow memory and slower catch-up blur it")
	}
	const n = 3000
	before, most := catchUpIdleTopics(t, n)
	if most < 64 {
		t.Fatalf("the catch-up held at most %d streams at once (as polled): too few to show what it leaves", most)
	}
	// The first collection after the catch-up keeps at most 4,300 B a topic
	// (TestCatchupLeavesNoHeap); without one, 7-12 KiB a topic stayed allocated.
	const bound = 5000
	perTopic := func() float64 { return (float64(heapAllocated()) - float64(before)) / n }
	parked := perTopic()
	var last float64
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = testlog.Until(ctx, func() bool { last = perTopic(); return last <= bound })
	t.Logf("%d topics caught up over at most %d streams at once; heap allocated per topic over both nodes: %.0f B as every mirror parked, %.0f B after", n, most, parked, last)
	if last > bound {
		t.Fatalf("5 s after every mirror parked, the heap held %.0f B per topic over both nodes, live or not yet collected (bound %d): the catch-up's garbage was not given back", last, bound)
	}
}

// heapProfileWriter samples the heap finely when path is set (a test's profile variable) and
// returns what writes the heap profile to a file then; with no path it writes nothing.
func heapProfileWriter(t *testing.T, path string) func(name string) {
	if path != "" {
		runtime.MemProfileRate = 4096
	}
	return func(name string) {
		if path == "" {
			return
		}
		f, err := os.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			t.Fatal(err)
		}
	}
}
