package replica

import (
	"slices"

	pb "go.etcd.io/raft/v3/raftpb"
)

// entryCache holds a group's newest durable raft entries, contiguous, up to
// max bytes of their protobuf size, so that Storage answers Entries and
// Term without reading Pebble. The entries are shared with raft, which
// never modifies an entry it has handed out or been handed. Storage's mutex
// guards it. Slices handed out share the backing array, so an element
// once handed out is never overwritten: a replaced suffix gets a new array.
type entryCache struct {
	max   uint64
	ents  []*pb.Entry
	sizes []uint64
	bytes uint64
	// dropped counts the entries dropped from the front of ents' array since it was
	// allocated: still reachable through it (dropFront).
	dropped int
}

// add caches ents (contiguous), replacing any cached suffix from ents'
// first index on, then drops the oldest entries past the bound.
func (c *entryCache) add(ents []*pb.Entry, sizes []uint64) {
	if c.max == 0 || len(ents) == 0 {
		return
	}
	first := ents[0].GetIndex()
	if len(c.ents) > 0 {
		lo, last := c.ents[0].GetIndex(), c.ents[len(c.ents)-1].GetIndex()
		switch {
		case first < lo || first > last+1:
			c.reset()
		default:
			n := int(first - lo)
			if n < len(c.ents) {
				for _, s := range c.sizes[n:] {
					c.bytes -= s
				}
				c.ents, c.sizes = c.ents[:n:n], c.sizes[:n:n]
			}
		}
	}
	if len(c.ents)+len(ents) > cap(c.ents) {
		c.dropped = 0 // append moves what is kept to a new array
	}
	c.ents = append(c.ents, ents...)
	c.sizes = append(c.sizes, sizes...)
	for _, s := range sizes {
		c.bytes += s
	}
	n := 0
	for c.bytes > c.max && n < len(c.ents) {
		c.bytes -= c.sizes[n]
		n++
	}
	c.dropFront(n)
}

// dropThrough forgets the entries up to and including index i.
func (c *entryCache) dropThrough(i uint64) {
	if len(c.ents) == 0 || i < c.ents[0].GetIndex() {
		return
	}
	n := min(int(i-c.ents[0].GetIndex()+1), len(c.ents))
	for _, s := range c.sizes[:n] {
		c.bytes -= s
	}
	c.dropFront(n)
}

// dropFront forgets the n oldest entries. A slice past them keeps its array, and through it
// every entry dropped from it, alive (a quiet group held its compacted entries; issue 29):
// once more were dropped from the array than it still holds, what is kept moves to arrays
// of its own, so that the dropped ones never outnumber the kept ones (and a copy costs,
// amortized, one pointer per entry dropped). The old array is not cleared: raft may still
// hold slices of it.
func (c *entryCache) dropFront(n int) {
	if n == 0 {
		return
	}
	c.ents, c.sizes = c.ents[n:], c.sizes[n:]
	c.dropped += n
	switch {
	case len(c.ents) == 0:
		c.ents, c.sizes, c.dropped = nil, nil, 0
	case c.dropped > len(c.ents):
		c.ents, c.sizes, c.dropped = slices.Clone(c.ents), slices.Clone(c.sizes), 0
	}
}

func (c *entryCache) reset() {
	c.ents, c.sizes, c.bytes, c.dropped = nil, nil, 0, 0
}

// slice returns entries [lo, hi) under raft's size rule (the first always,
// then while the total stays within maxSize) if the cache holds all of
// [lo, hi); ok is false otherwise. The slice's capacity is its length, so
// raft appending to it never writes into the cache.
func (c *entryCache) slice(lo, hi, maxSize uint64) ([]*pb.Entry, bool) {
	if len(c.ents) == 0 || lo < c.ents[0].GetIndex() || hi > c.ents[len(c.ents)-1].GetIndex()+1 {
		return nil, false
	}
	i := int(lo - c.ents[0].GetIndex())
	j := i + 1
	size := c.sizes[i]
	for j < int(hi-c.ents[0].GetIndex()) {
		size += c.sizes[j]
		if size > maxSize {
			break
		}
		j++
	}
	return c.ents[i:j:j], true
}

// term is the term of the cached entry i.
func (c *entryCache) term(i uint64) (uint64, bool) {
	if len(c.ents) == 0 || i < c.ents[0].GetIndex() || i > c.ents[len(c.ents)-1].GetIndex() {
		return 0, false
	}
	return c.ents[i-c.ents[0].GetIndex()].GetTerm(), true
}
