package client

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/quicmq/quicmq/internal/wire"
)

// Position is a portable position: per topic, per origin region, the last origin offset it
// covers (every record of that origin up to it). Every record carries its origin region and
// origin offset, and every region keeps each origin's order in its log, so a Position means
// the same in every region: a subscription given one (SubscribeOptions.Position) skips the
// records it covers and delivers the rest, each origin in order, on a node of any region.
// A topic or origin it does not name has nothing covered.
//
// Its text form (MarshalText, also what encoding/json writes) is one entry per topic,
// sorted, separated by spaces: "TOPIC=REGION:OFFSET,REGION:OFFSET". A topic with nothing
// covered is "TOPIC=".
type Position map[string]map[string]uint64

// Covers reports whether p covers r: p names r's origin in r's topic at or past its origin
// offset.
func (p Position) Covers(r Record) bool {
	last, ok := p[r.Topic][r.OriginRegion]
	return ok && r.OriginOffset <= last
}

// Clone returns a copy of p that shares nothing with it.
func (p Position) Clone() Position {
	if p == nil {
		return nil
	}
	c := make(Position, len(p))
	for t, o := range p {
		c[t] = maps.Clone(o)
	}
	return c
}

// Merge raises p (in place) to cover everything q covers too.
func (p Position) Merge(q Position) {
	for t, o := range q {
		if p[t] == nil {
			p[t] = make(map[string]uint64, len(o))
		}
		for r, off := range o {
			if last, ok := p[t][r]; !ok || off > last {
				p[t][r] = off
			}
		}
	}
}

// String is the text form.
func (p Position) String() string {
	b, _ := p.MarshalText()
	return string(b)
}

// MarshalText writes the text form.
func (p Position) MarshalText() ([]byte, error) {
	var b []byte
	for i, t := range slices.Sorted(maps.Keys(p)) {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(append(b, t...), '=')
		for j, r := range slices.Sorted(maps.Keys(p[t])) {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(append(append(b, r...), ':'), p[t][r], 10)
		}
	}
	return b, nil
}

// UnmarshalText reads the text form, replacing p's contents.
func (p *Position) UnmarshalText(b []byte) error {
	out := Position{}
	for _, entry := range strings.Fields(string(b)) {
		topic, origins, ok := strings.Cut(entry, "=")
		if !ok || topic == "" {
			return fmt.Errorf("client: position: entry %q: want TOPIC=REGION:OFFSET,...", entry)
		}
		if _, dup := out[topic]; dup {
			return fmt.Errorf("client: position: topic %q twice", topic)
		}
		o := map[string]uint64{}
		if origins != "" {
			for _, ro := range strings.Split(origins, ",") {
				region, off, ok := strings.Cut(ro, ":")
				if !ok || region == "" {
					return fmt.Errorf("client: position: topic %q: %q: want REGION:OFFSET", topic, ro)
				}
				v, err := strconv.ParseUint(off, 10, 64)
				if err != nil {
					return fmt.Errorf("client: position: topic %q, region %q: offset %q: %w", topic, region, off, err)
				}
				if _, dup := o[region]; dup {
					return fmt.Errorf("client: position: topic %q: region %q twice", topic, region)
				}
				o[region] = v
			}
		}
		out[topic] = o
	}
	*p = out
	return nil
}

// block is p as SUBSCRIBE's vector block, sorted.
func (p Position) block() ([]wire.TopicVector, error) {
	if p == nil {
		return nil, nil
	}
	v, err := wire.VectorBlock(p, slices.Sort)
	if err != nil {
		return nil, errorf(CodeInvalidArgument, "%v", strings.TrimPrefix(err.Error(), "wire: "))
	}
	return v, nil
}

// positions is what a Subscription knows of its position: the vector of the records it
// delivered, and for a durable consumer that of the records acknowledged. Next (under readMu)
// adds deliveries, Ack acknowledgements; Position reads it from any goroutine.
type positions struct {
	mu        sync.Mutex
	delivered map[string]*topicPos // a Position, with no map per topic for its usual one origin
	// cur is the delivered position's entries of the topics of the current stream, by the
	// stream's topic index, kept out of delivered (no map entry per topic for a wildcard
	// over many) until the stream is replaced (newStream); position merges both.
	cur       chunks[curTopic]
	slab      []topicPos          // where new topicPos come from, a chunk at a time
	acked     Position            // durable consumers only; nil otherwise
	runs      map[string][]ackRun // durable: per topic, the records delivered and not yet acknowledged
	gen       uint32              // from 1, increases at each move to another region: records of an earlier one are not acked there
	last      *topicPos           // delivered[lastTopic], cached for runs of one topic
	lastTopic string
}

// ackRun is a run of delivered, unacknowledged records of one topic and origin whose offsets
// and origin offsets both increase by one.
type ackRun struct {
	first, last uint64 // offsets in the current region's log
	origin      string
	originFirst uint64
}

// topicPos is one topic's entry of a Position: the last origin offset of each origin region.
// A topic's records mostly come from one origin, kept without a map (a map per topic was
// most of what a wildcard over 100,000 topics of one record each cost the SDK).
type topicPos struct {
	region string // the first origin region, "" for none yet
	off    uint64
	more   map[string]uint64 // any other origins
}

// raise makes the position of origin region at least off.
func (t *topicPos) raise(region string, off uint64) {
	switch {
	case region != "" && t.region == "" && t.more == nil: // the first origin
		t.region, t.off = region, off
	case region != "" && region == t.region:
		t.off = max(t.off, off)
	default:
		if t.more == nil {
			t.more = make(map[string]uint64)
		}
		if last, ok := t.more[region]; !ok || off > last {
			t.more[region] = off
		}
	}
}

// origins is t as a Position's entry, a map of its own.
func (t *topicPos) origins() map[string]uint64 {
	m := make(map[string]uint64, len(t.more)+1)
	if t.region != "" {
		m[t.region] = t.off
	}
	for r, off := range t.more {
		m[r] = off
	}
	return m
}

// curTopic is an entry of the delivered position under a topic index of the current stream.
type curTopic struct {
	name  string
	pos   *topicPos
	inMap bool // pos is delivered[name] too
}

// merge raises t to cover everything u covers too.
func (t *topicPos) merge(u *topicPos) {
	if u.region != "" {
		t.raise(u.region, u.off)
	}
	for r, off := range u.more {
		t.raise(r, off)
	}
}

// newTopicPos returns an empty entry.
func (p *positions) newTopicPos() *topicPos {
	if len(p.slab) == 0 {
		p.slab = make([]topicPos, 256)
	}
	t := &p.slab[0]
	p.slab = p.slab[1:]
	return t
}

// topic returns the entry of topic, made empty if there is none, in delivered.
func (p *positions) topic(topic string) *topicPos {
	if t := p.delivered[topic]; t != nil {
		return t
	}
	t := p.newTopicPos()
	p.delivered[topic] = t
	return t
}

// indexed returns the entry of topic, which the current stream numbers index.
func (p *positions) indexed(topic string, index uint64) *topicPos {
	if index < uint64(p.cur.len()) {
		if c := p.cur.at(int(index)); c.name == topic {
			return c.pos
		}
	}
	if index != uint64(p.cur.len()) { // out of the stream's order: by name
		return p.topic(topic)
	}
	if t := p.delivered[topic]; t != nil {
		p.cur.add(curTopic{name: topic, pos: t, inMap: true})
		return t
	}
	t := p.newTopicPos()
	p.cur.add(curTopic{name: topic, pos: t})
	return t
}

// newStream moves the current stream's entries into delivered: the next stream numbers its
// topics afresh.
func (p *positions) newStream() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.foldLocked()
}

func (p *positions) foldLocked() {
	p.cur.each(func(c *curTopic) {
		if c.inMap {
			return
		}
		if t := p.delivered[c.name]; t != nil {
			t.merge(c.pos) // one topic under two indices (bound again)
		} else {
			p.delivered[c.name] = c.pos
		}
	})
	p.cur = chunks[curTopic]{}
	p.last, p.lastTopic = nil, ""
}

// position returns the delivered position as a Position, sharing nothing with p.
func (p *positions) position() Position {
	out := make(Position, len(p.delivered)+p.cur.len())
	for topic, t := range p.delivered {
		out[topic] = t.origins()
	}
	p.cur.each(func(c *curTopic) {
		if c.inMap {
			return
		}
		o := out[c.name]
		if o == nil {
			out[c.name] = c.pos.origins()
			return
		}
		for r, off := range c.pos.origins() {
			if last, ok := o[r]; !ok || off > last {
				o[r] = off
			}
		}
	})
	return out
}

func newPositions(durable bool, from Position) *positions {
	p := &positions{delivered: make(map[string]*topicPos, len(from)), gen: 1}
	for topic, o := range from {
		t := p.topic(topic)
		for r, off := range o {
			t.raise(r, off)
		}
	}
	if durable {
		p.acked = p.position()
		p.runs = make(map[string][]ackRun)
	}
	return p
}

// deliver records r as delivered. The node never sends a record the position covers (each
// origin's order is kept in a log, and a move resumes after the position), so it is not
// checked here.
// generation is the region generation records are delivered in now.
func (p *positions) generation() uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen
}

func (p *positions) deliver(r *Record, index uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lastTopic != r.Topic || p.last == nil {
		p.last = p.indexed(r.Topic, index)
		p.lastTopic = r.Topic
	}
	p.last.raise(r.OriginRegion, r.OriginOffset)
	r.gen = p.gen
	if p.runs != nil {
		runs := p.runs[r.Topic]
		if n := len(runs); n > 0 {
			if run := &runs[n-1]; run.origin == r.OriginRegion && run.last+1 == r.Offset && run.originFirst+(run.last-run.first)+1 == r.OriginOffset {
				run.last = r.Offset
				return
			}
		}
		p.runs[r.Topic] = append(runs, ackRun{first: r.Offset, last: r.Offset, origin: r.OriginRegion, originFirst: r.OriginOffset})
	}
}

// ack records that every record of topic delivered up to offset (in the region of generation
// gen; 0, a Record the application made: the current one) is acknowledged. It reports whether
// the ACK is to be sent: not for a record of an earlier region (its offset means nothing here).
func (p *positions) ack(topic string, offset uint64, gen uint32) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if gen != 0 && gen != p.gen {
		return false
	}
	if p.runs == nil {
		return true
	}
	runs := p.runs[topic]
	i := 0
	for ; i < len(runs) && runs[i].first <= offset; i++ {
		run := &runs[i]
		upTo := min(run.last, offset)
		o := p.acked[topic]
		if o == nil {
			o = make(map[string]uint64)
			p.acked[topic] = o
		}
		if off := run.originFirst + (upTo - run.first); off > o[run.origin] || !has(o, run.origin) {
			o[run.origin] = off
		}
		if upTo < run.last { // a part of the run stays unacknowledged
			run.originFirst += upTo - run.first + 1
			run.first = upTo + 1
			break
		}
	}
	if i == len(runs) {
		delete(p.runs, topic)
	} else {
		p.runs[topic] = runs[i:]
	}
	return true
}

func has(m map[string]uint64, k string) bool { _, ok := m[k]; return ok }

// moved starts a new region: a durable's acknowledged position becomes what was delivered
// (the subscription resumed after it there, and the node stores it as acknowledged), and
// records of the earlier region are no longer acknowledged.
func (p *positions) moved() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gen++
	if p.runs != nil {
		p.acked = p.position()
		clear(p.runs)
	}
}

// snapshot returns the delivered position (resume) or, for a durable, the acknowledged one.
func (p *positions) snapshot(acked bool) Position {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if acked && p.acked != nil {
		return p.acked.Clone()
	}
	return p.position()
}
