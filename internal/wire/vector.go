package wire

import "fmt"

// Portable positions (docs/protocol.md, "Vector positions").
//
// Every record carries its origin region and origin offset, and every region keeps each
// origin's order in its log (invariant I7), so {origin region -> last origin offset} means
// the same in every region. A SUBSCRIBE whose flags carry SubscribeVector names, after its
// flags (and after the group block, if any), such a vector per topic: the node skips the
// records it covers and delivers the rest, each origin in order, in any region.

// SubscribeVector is the Subscribe flag saying a vector block follows the flags (after a
// group block). Encoding sets it from Subscribe.Vector; a SUBSCRIBE with the flag and no
// block is malformed. A node that knows no vectors finds the block as trailing bytes and
// refuses the frame as malformed (ERROR 1).
const SubscribeVector = 1 << 4

// Bounds of a vector block, checked before anything is allocated.
const (
	MaxVectorTopics  = 4096 // topics of one block
	MaxVectorOrigins = 256  // origin regions of one topic
)

// TopicVector is one topic's part of a vector block: the last origin offset covered per
// origin region. A region that is absent has nothing covered.
type TopicVector struct {
	Topic   string
	Origins []OriginOffset
}

// OriginOffset is the last origin offset of Region a position covers (every record of that
// origin at or below it).
type OriginOffset struct {
	Region string
	Offset uint64
}

func appendVector(e enc, v []TopicVector) enc {
	if v == nil {
		return e
	}
	e = e.uvarint(uint64(len(v)))
	for _, t := range v {
		e = e.str(t.Topic).uvarint(uint64(len(t.Origins)))
		for _, o := range t.Origins {
			e = e.str(o.Region).uvarint(o.Offset)
		}
	}
	return e
}

// decodeVector decodes the vector block of a SUBSCRIBE whose flags are flags, if they say one
// follows. A block naming a topic twice, or a region twice in one topic, an empty topic or
// region, or counts over the bounds is malformed.
func decodeVector(d *dec, flags uint64) []TopicVector {
	if flags&SubscribeVector == 0 || d.err != nil {
		return nil
	}
	n := d.uvarint("vector topics")
	switch {
	case d.err != nil:
		return nil
	case n > MaxVectorTopics:
		d.fail("vector: %d topics over the limit of %d", n, MaxVectorTopics)
		return nil
	case n*2 > uint64(len(d.b)): // each topic takes at least two bytes
		d.fail("vector: %d topics exceed what %d bytes can hold", n, len(d.b))
		return nil
	}
	v := make([]TopicVector, 0, n)
	topics := make(map[string]bool, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		t := TopicVector{Topic: d.str("vector topic")}
		m := d.uvarint("vector origins")
		switch {
		case d.err != nil:
			return nil
		case t.Topic == "":
			d.fail("vector: empty topic")
			return nil
		case topics[t.Topic]:
			d.fail("vector: topic %q twice", t.Topic)
			return nil
		case m > MaxVectorOrigins:
			d.fail("vector: topic %q: %d origins over the limit of %d", t.Topic, m, MaxVectorOrigins)
			return nil
		case m*2 > uint64(len(d.b)):
			d.fail("vector: topic %q: %d origins exceed what %d bytes can hold", t.Topic, m, len(d.b))
			return nil
		}
		topics[t.Topic] = true
		t.Origins = make([]OriginOffset, 0, m)
		for j := uint64(0); j < m && d.err == nil; j++ {
			o := OriginOffset{Region: d.str("vector region"), Offset: d.uvarint("vector offset")}
			if d.err == nil && o.Region == "" {
				d.fail("vector: topic %q: empty region", t.Topic)
			}
			for _, p := range t.Origins {
				if d.err == nil && p.Region == o.Region {
					d.fail("vector: topic %q: region %q twice", t.Topic, o.Region)
				}
			}
			t.Origins = append(t.Origins, o)
		}
		v = append(v, t)
	}
	if d.err != nil {
		return nil
	}
	return v
}

// VectorMap is the block as maps: topic -> origin region -> last covered origin offset.
func VectorMap(v []TopicVector) map[string]map[string]uint64 {
	if v == nil {
		return nil
	}
	m := make(map[string]map[string]uint64, len(v))
	for _, t := range v {
		o := make(map[string]uint64, len(t.Origins))
		for _, p := range t.Origins {
			o[p.Region] = p.Offset
		}
		m[t.Topic] = o
	}
	return m
}

// VectorBlock is VectorMap's inverse, topics and regions in the order sorted gives them (nil
// sorted: map order). It fails when the block would be over the bounds.
func VectorBlock(m map[string]map[string]uint64, sorted func([]string)) ([]TopicVector, error) {
	if len(m) > MaxVectorTopics {
		return nil, fmt.Errorf("wire: vector of %d topics: over the limit of %d", len(m), MaxVectorTopics)
	}
	topics := make([]string, 0, len(m))
	for t := range m {
		topics = append(topics, t)
	}
	if sorted != nil {
		sorted(topics)
	}
	v := make([]TopicVector, 0, len(m))
	for _, t := range topics {
		o := m[t]
		if len(o) > MaxVectorOrigins {
			return nil, fmt.Errorf("wire: vector of topic %q: %d origins over the limit of %d", t, len(o), MaxVectorOrigins)
		}
		regions := make([]string, 0, len(o))
		for r := range o {
			regions = append(regions, r)
		}
		if sorted != nil {
			sorted(regions)
		}
		tv := TopicVector{Topic: t, Origins: make([]OriginOffset, 0, len(o))}
		for _, r := range regions {
			tv.Origins = append(tv.Origins, OriginOffset{Region: r, Offset: o[r]})
		}
		v = append(v, tv)
	}
	return v, nil
}

// TypePosition is the frame by which a serving node mirrors a durable consumer's portable
// position on a mirror stream (node to node, after the records).
const TypePosition Type = 0x43

// Position is a durable consumer's vector position on the mirror stream's topic, as the
// serving node stored it: the consumer's name (with its tenant's namespace), when the serving
// node stored it (unix nanoseconds, its clock) and, per origin region, the last origin offset
// it acknowledged. It carries 1 to MaxVectorOrigins origins.
type Position struct {
	Durable string
	Time    int64
	Origins []OriginOffset
}

func (*Position) Type() Type { return TypePosition }

func (f *Position) appendBody(e enc) enc {
	e = e.str(f.Durable).uvarint(uint64(f.Time)).uvarint(uint64(len(f.Origins)))
	for _, o := range f.Origins {
		e = e.str(o.Region).uvarint(o.Offset)
	}
	return e
}

func (f *Position) decodeBody(d *dec) {
	f.Durable = d.str("durable")
	f.Time = int64(d.uvarint("time"))
	n := d.uvarint("origins")
	switch {
	case d.err != nil:
		return
	case f.Durable == "":
		d.fail("empty durable")
		return
	case n == 0 || n > MaxVectorOrigins:
		d.fail("%d origins: want 1 to %d", n, MaxVectorOrigins)
		return
	case n*2 > uint64(len(d.b)):
		d.fail("%d origins exceed what %d bytes can hold", n, len(d.b))
		return
	}
	f.Origins = make([]OriginOffset, 0, n)
	for range n {
		o := OriginOffset{Region: d.str("region"), Offset: d.uvarint("offset")}
		if d.err == nil && o.Region == "" {
			d.fail("empty region")
		}
		for _, p := range f.Origins {
			if d.err == nil && p.Region == o.Region {
				d.fail("region %q twice", o.Region)
			}
		}
		if d.err != nil {
			f.Origins = nil
			return
		}
		f.Origins = append(f.Origins, o)
	}
}
