package node

import (
	"context"
	"fmt"
	"os"
	"runtime"
	rtmetrics "runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/testlog"
)

// heapState is what the garbage collector keeps and marks, read after two collections (so
// that what sync.Pools keep is gone too): the live heap, the part of it the GC scans for
// pointers, and the live objects it marks.
type heapState struct {
	alloc, scan, objects uint64
}

func readHeapState() heapState {
	runtime.GC()
	runtime.GC()
	s := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/heap:bytes"}, {Name: "/gc/heap/objects:objects"}}
	rtmetrics.Read(s)
	return heapState{alloc: s[0].Value.Uint64(), scan: s[1].Value.Uint64(), objects: s[2].Value.Uint64()}
}

// per is what each of n topics added from before to after.
func (after heapState) per(before heapState, n int) (alloc, scan, objects float64) {
	d := func(a, b uint64) float64 { return (float64(a) - float64(b)) / float64(n) }
	return d(after.alloc, before.alloc), d(after.scan, before.scan), d(after.objects, before.objects)
}

// TestIdleMirroredTopicHeap is issue 34's figure 3 at its root: what an idle (parked)
// mirrored topic leaves in the Go heap of the two nodes of a mesh, every layer included
// (the origin's topic, its copy and cursor in the mirroring log, both links' parked
// mirrors, the catalog streams, placement, metrics, subscription tables), against a topic
// nothing mirrors. Two regions of one node each mirror idle.> (as qmqbench's
// --idle-mirrored): N topics are created at "idle" by one publish each, mirrored into
// "hot", and every mirror parks; then N topics are created at "hot" that nothing mirrors.
// The live heap, the part of it the GC scans and the objects it marks are read before and
// after each. What a parked mirror costs the GC's marking is what a hot topic beside it
// pays for (issue 34: 5-8% more CPU a delivery in scenario 8 with 10,000 of them).
//
// On demand, a measurement (federation's TestParkedMirrorsCostWhatLocalTopicsCost holds the
// bound): QUICMQ_IDLE_MIRRORS=N runs it with N topics, QUICMQ_IDLE_MIRRORS_HEAP=FILE also
// writes the heap profile of the parked state (an allocation sampled every 4 KiB):
//
//	QUICMQ_IDLE_MIRRORS=10000 go test ./node -run '^TestIdleMirroredTopicHeap$' -v
func TestIdleMirroredTopicHeap(t *testing.T) {
	n, err := strconv.Atoi(os.Getenv("QUICMQ_IDLE_MIRRORS"))
	if err != nil || n <= 0 {
		t.Skip("on demand: QUICMQ_IDLE_MIRRORS=N (idle mirrored topics to create)")
	}
	profile := os.Getenv("QUICMQ_IDLE_MIRRORS_HEAP")
	if profile != "" {
		runtime.MemProfileRate = 4096 // every 1 a byte is too slow for 10,000 topics under load
	}
	m := newTestMeshWith(t, func(_ string, c *Config) {
		// A small stream bound: what a catch-up leaves in proportion to the streams it held at
		// once (goroutine records, which Go never frees) is not a per-topic cost.
		c.Mirror, c.MirrorStreams = []string{"idle.>"}, 32
	}, "hot", "idle")
	hot, idle := m.nodes["hot"], m.nodes["idle"]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	s0 := readHeapState()
	createIdleTopics(ctx, t, idle, "idle", n)
	waitIdleMirrored(t, hot, idle, n)
	s1 := readHeapState()
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			t.Fatal(err)
		}
		_ = pprof.Lookup("heap").WriteTo(f, 0)
		f.Close()
	}
	createIdleTopics(ctx, t, hot, "local", n)
	testlog.WaitFor(t, time.Minute, "every local topic created", func() bool { return countTopics(hot, "local.") == n })
	s2 := readHeapState()
	if !linksParked(hot) || !linksParked(idle) {
		t.Fatal("a topic nothing mirrors opened a mirror stream")
	}
	ma, ms, mo := s1.per(s0, n)
	la, ls, lo := s2.per(s1, n)
	t.Logf("%d topics; per mirrored topic over both nodes (origin's topic, its copy, both sides' federation state): live %.0f B, scannable %.0f B, %.1f objects; per local topic: live %.0f B, scannable %.0f B, %.1f objects",
		n, ma, ms, mo, la, ls, lo)
}

// createIdleTopics creates n topics PREFIX.tNNNNNN at nd by one publish each, pipelined from
// one client.
func createIdleTopics(ctx context.Context, t *testing.T, nd *Node, prefix string, n int) {
	t.Helper()
	c := dialNode(t, nd, client.Options{IdleTimeout: 30 * time.Second})
	defer c.Close()
	futures := make([]*client.Future, 0, n)
	for i := range n {
		f, err := c.PublishAsync(ctx, client.Message{Topic: fmt.Sprintf("%s.t%06d", prefix, i), Payload: []byte("idle")})
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// countTopics counts nd's topics whose names begin with prefix.
func countTopics(nd *Node, prefix string) int {
	k := 0
	for _, tp := range nd.Log().Topics() {
		if strings.HasPrefix(tp.Name, prefix) {
			k++
		}
	}
	return k
}

// linksParked reports whether every link of nd has no mirror stream open and none waiting.
func linksParked(nd *Node) bool {
	for _, l := range nd.Federation().Links() {
		if l.MirrorStreams != 0 || l.MirrorsWaiting != 0 {
			return false
		}
	}
	return true
}

// waitIdleMirrored waits until hot holds the n topics idle.* mirrored from idle and both
// nodes' links parked every mirror. It returns the most mirror streams it saw open at hot.
func waitIdleMirrored(t *testing.T, hot, idle *Node, n int) (mostStreams int) {
	t.Helper()
	testlog.WaitForErr(t, 5*time.Minute, "every idle topic mirrored into hot and every mirror parked", func() error {
		for _, l := range hot.Federation().Links() {
			mostStreams = max(mostStreams, l.MirrorStreams)
		}
		if k := countTopics(hot, "idle."); k != n || !linksParked(hot) || !linksParked(idle) {
			return fmt.Errorf("%d of %d mirrored; hot's links %+v; idle's %+v", k, n, hot.Federation().Links(), idle.Federation().Links())
		}
		return nil
	})
	return mostStreams
}
