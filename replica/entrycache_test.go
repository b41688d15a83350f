package replica

import (
	"runtime"
	"testing"
	"weak"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func cacheAdd(c *entryCache, es []*pb.Entry) {
	sizes := make([]uint64, len(es))
	for i, e := range es {
		sizes[i] = uint64(proto.Size(e))
	}
	c.add(es, sizes)
}

// A slice the cache handed out (raft may hold it in a message) keeps its
// entries when the cache later replaces that suffix or drops its front, and
// raft appending to it never writes into the cache.
func TestEntryCacheNeverChangesWhatItHandedOut(t *testing.T) {
	c := &entryCache{max: 1 << 20}
	cacheAdd(c, ents(1, 6, 1))
	out, ok := c.slice(3, 7, 1<<20)
	if !ok || len(out) != 4 || cap(out) != 4 {
		t.Fatalf("slice(3, 7) = %d entries (cap %d), ok %v; want 4 (cap 4)", len(out), cap(out), ok)
	}
	cacheAdd(c, ents(4, 8, 2)) // replaces 4..6
	_ = append(out, ent(99, 9, "x"))
	c.dropThrough(5)
	for i, e := range out {
		if e.GetIndex() != uint64(3+i) || e.GetTerm() != 1 {
			t.Fatalf("handed-out entry %d is now index %d term %d, want %d term 1", i, e.GetIndex(), e.GetTerm(), 3+i)
		}
	}
	if tm, ok := c.term(6); !ok || tm != 2 {
		t.Fatalf("term(6) = %d, %v; want 2 from the replacing entries", tm, ok)
	}
	if _, ok := c.term(5); ok {
		t.Fatal("term(5) answered after dropThrough(5)")
	}
	if _, ok := c.slice(5, 7, 1<<20); ok {
		t.Fatal("slice(5, 7) answered although 5 was dropped")
	}
}

// The bound holds, the newest entries stay, and a range not wholly cached is
// left to Pebble.
func TestEntryCacheBound(t *testing.T) {
	one := uint64(proto.Size(ent(1, 1, "e1.1")))
	c := &entryCache{max: 3 * one}
	cacheAdd(c, ents(1, 5, 1))
	if c.bytes > c.max || len(c.ents) != 3 || c.ents[0].GetIndex() != 3 {
		t.Fatalf("cache holds %d entries from %d (%d bytes), want 3 from 3 within %d", len(c.ents), c.ents[0].GetIndex(), c.bytes, c.max)
	}
	if _, ok := c.slice(2, 5, 1<<20); ok {
		t.Fatal("slice(2, 5) answered although 2 is not cached")
	}
	if out, ok := c.slice(3, 6, 0); !ok || len(out) != 1 {
		t.Fatalf("slice(3, 6, maxSize 0) = %d entries, %v; want the first only", len(out), ok)
	}
	cacheAdd(c, ents(9, 9, 1)) // not contiguous: starts over
	if len(c.ents) != 1 || c.ents[0].GetIndex() != 9 || c.bytes != one {
		t.Fatalf("after a gap the cache holds %d entries (%d bytes), want entry 9 only", len(c.ents), c.bytes)
	}
	(&entryCache{}).add(ents(1, 2, 1), []uint64{1, 1}) // max 0: caches nothing, no panic
}

// Entries dropped from the cache's front (a compaction, the bound) do not stay reachable
// through the array the kept ones still sit in: once more were dropped than are kept, the
// kept ones move. Before, a group holding a few entries kept every entry dropped since its
// array was last grown (issue 29: a quiet region's groups held their compacted entries).
func TestEntryCacheLetsDroppedEntriesGo(t *testing.T) {
	c := &entryCache{max: 1 << 30}
	cacheAdd(c, ents(1, 64, 1))
	dropped := make([]weak.Pointer[pb.Entry], 60)
	for i, e := range c.ents[:60] {
		dropped[i] = weak.Make(e)
	}
	c.dropThrough(60)
	if len(c.ents) != 4 || c.ents[0].GetIndex() != 61 {
		t.Fatalf("after dropThrough(60) the cache holds %d entries from %d, want 4 from 61", len(c.ents), c.ents[0].GetIndex())
	}
	runtime.GC()
	alive := 0
	for _, w := range dropped {
		if w.Value() != nil {
			alive++
		}
	}
	if alive > 0 {
		t.Fatalf("%d of the 60 dropped entries are still reachable after a collection: the cache's array holds them", alive)
	}
	runtime.KeepAlive(c)
}
