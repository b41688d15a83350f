package replica

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// De-duplication of replicated appends: a record with a producer and a
// sequence is stored once per (topic, producer, sequence) while its first
// copy is among the last DedupWindow such records its group applied (the
// window), and a sequence below every one the window holds of its producer
// is refused (it may have been stored and forgotten). The window is part of
// the group's replicated state: each of its records is stored under
// 'L' | group | 'd' | ordinal in the batch that applies it, and deleted in
// the batch that pushes it out, so every replica, and every restart,
// decides alike. It looks at nothing else: not the clock, not what
// retention kept.

type ringEnt struct {
	key dedupKey
	seq uint64
}

type dedupKey struct{ topic, producer string }

// dedupProducer is the window's entries of one (topic, producer), sorted by
// sequence.
type dedupProducer struct{ ents []dedupEnt }

type dedupEnt struct {
	seq, off uint64
	time     int64
}

func (p *dedupProducer) find(seq uint64) (int, bool) {
	return slices.BinarySearchFunc(p.ents, seq, func(e dedupEnt, s uint64) int {
		switch {
		case e.seq < s:
			return -1
		case e.seq > s:
			return 1
		}
		return 0
	})
}

// loadDedup loads the stored window: the ordinals up to keyed, contiguous.
// A window stored under a larger DedupWindow is cut to this one's in memory.
func (s *WalSM) loadDedup(g *walGroup) error {
	var first uint64
	err := s.scanGroup(g.id, kindWalDedup, func(k, p []byte) error {
		if len(k) != 8 {
			return fmt.Errorf("%w: group %d: de-duplication key of %d bytes", errCorrupt, g.id, len(k))
		}
		n := binary.BigEndian.Uint64(k)
		if len(g.ring) == 0 {
			first = n
		}
		if n != first+uint64(len(g.ring)) || n >= g.keyed {
			return fmt.Errorf("%w: group %d: de-duplication entry %d out of order (window from %d, %d keyed records applied)", errCorrupt, g.id, n, first, g.keyed)
		}
		d := entryDecoder{b: p}
		key := dedupKey{topic: d.str(), producer: d.str()}
		e := dedupEnt{seq: d.uvarint(), off: d.uvarint(), time: int64(d.uvarint())}
		if d.bad == "" && len(d.b) > 0 {
			d.fail("trailing bytes")
		}
		if d.bad != "" {
			return fmt.Errorf("%w: group %d: de-duplication entry: %s", errCorrupt, g.id, d.bad)
		}
		s.remember(g, key, e)
		return nil
	})
	if err != nil {
		return err
	}
	if len(g.ring) > 0 && first+uint64(len(g.ring)) != g.keyed {
		return fmt.Errorf("%w: group %d: de-duplication window ends at %d, %d keyed records applied", errCorrupt, g.id, first+uint64(len(g.ring)), g.keyed)
	}
	for len(g.ring) > s.window {
		s.forgetOldest(g, g.keyed)
	}
	return nil
}

// remember adds e to the in-memory window (the caller stores it).
func (s *WalSM) remember(g *walGroup, key dedupKey, e dedupEnt) {
	p := g.dedup[key]
	if p == nil {
		p = &dedupProducer{}
		g.dedup[key] = p
	}
	i, found := p.find(e.seq)
	if !found {
		p.ents = slices.Insert(p.ents, i, e)
	}
	g.ring = append(g.ring, ringEnt{key, e.seq})
}

// forgetOldest drops the window's oldest entry from memory; it returns its
// ordinal.
func (s *WalSM) forgetOldest(g *walGroup, keyed uint64) uint64 {
	old := g.ring[0]
	g.ring = g.ring[1:]
	ord := keyed - uint64(len(g.ring)) - 1
	if p := g.dedup[old.key]; p != nil {
		if i, found := p.find(old.seq); found {
			p.ents = slices.Delete(p.ents, i, i+1)
		}
		if len(p.ents) == 0 {
			delete(g.dedup, old.key)
		}
	}
	return ord
}

func (s *WalSM) storeDedup(b *pebble.Batch, g *walGroup, key dedupKey, e dedupEnt) error {
	k := indexKey(prefixLog, kindWalDedup, g.id, g.keyed)
	p := appendStr(nil, key.topic)
	p = appendStr(p, key.producer)
	p = binary.AppendUvarint(p, e.seq)
	p = binary.AppendUvarint(p, e.off)
	p = binary.AppendUvarint(p, uint64(e.time))
	return b.Set(k, seal(k, p), nil)
}
