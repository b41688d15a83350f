package node

import (
	"context"
	"os"
	"runtime"
	rtmetrics "runtime/metrics"
	"runtime/pprof"
	"testing"
	"time"
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
	if profile != "" {
		runtime.MemProfileRate = 4096
	}
	writeProfile := func(name string) {
		if profile == "" {
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
	m := newTestMeshWith(t, func(_ string, c *Config) { c.Mirror = []string{"idle.>"} }, "hot", "idle")
	hot, idle := m.nodes["hot"], m.nodes["idle"]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	before := liveAfterOneGC()
	createIdleTopics(ctx, t, idle, "idle", n)
	most := waitIdleMirrored(t, hot, idle, n)
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
