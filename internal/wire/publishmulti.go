package wire

import "encoding/binary"

// PUBLISH_MULTI (0x16, protocol version 5) carries consecutive publishes to many topics in one
// frame: a client that takes topics in turn sends one frame where PUBLISH_BATCH would need one
// per publish. Body: seq varint (the first publish's), then one or more runs until the body
// ends, each:
//
//	topic string, count varint (1 to MaxBatchPublishes), then count entries
//
// with entries as PUBLISH_BATCH's (producer_id string, sequence varint, headers headers,
// payload bytes). Entry k of the frame, counting across runs, is the publish of seq+k, to its
// run's topic, and is answered exactly as a PUBLISH of that seq would be (PUBLISH_ACK,
// PUBLISH_ERROR, or its place in a PUBLISH_ACKS). At most MaxBatchPublishes entries in all.
// A run's topic over MaxTopic refuses that run's entries (Publish.Refused, code 4), not the
// others. A node reads it only on a connection of version 5 or later (docs/protocol.md,
// "Publish stream").

// TypePublishMulti is the type of the PUBLISH_MULTI frame.
const TypePublishMulti Type = 0x16

// MultiVersion is the first protocol version in which a node reads PUBLISH_MULTI.
const MultiVersion = 5

// PublishMulti is a decoded PUBLISH_MULTI frame. Decoding fills in each publish's Seq (Seq+k)
// and Topic, so a receiver handles them as PUBLISH frames; encoding uses the frame's Seq and
// each publish's Topic (consecutive publishes to one topic share a run) and other fields.
type PublishMulti struct {
	Seq       uint64
	Publishes []Publish
}

func (*PublishMulti) Type() Type { return TypePublishMulti }

func (f *PublishMulti) appendBody(e enc) enc {
	e = e.uvarint(f.Seq)
	for i := 0; i < len(f.Publishes); {
		j := i + 1
		for j < len(f.Publishes) && f.Publishes[j].Topic == f.Publishes[i].Topic {
			j++
		}
		e = e.str(f.Publishes[i].Topic).uvarint(uint64(j - i))
		for ; i < j; i++ {
			e = f.Publishes[i].appendEntry(e)
		}
	}
	return e
}

func (f *PublishMulti) decodeBody(d *dec) {
	f.Seq = d.uvarint("seq")
	if d.err == nil && len(d.b) == 0 {
		d.fail("no runs")
	}
	seq := f.Seq
	for d.err == nil && len(d.b) > 0 {
		topic, refused := d.publishTopic()
		n := d.uvarint("count")
		switch {
		case d.err != nil:
			return
		case n == 0:
			d.fail("a run of 0 publishes")
			return
		case n > uint64(MaxBatchPublishes-len(f.Publishes)):
			d.fail("more than %d publishes", MaxBatchPublishes)
			return
		}
		if f.Publishes == nil {
			f.Publishes = make([]Publish, 0, min(int(n), len(d.b)/4+1))
		}
		for range n {
			if d.err != nil {
				return
			}
			if len(f.Publishes) > 0 && seq == 0 {
				d.fail("seq past 2^64")
				return
			}
			if len(d.b) == 0 {
				d.fail("run of %s ends after %d of %d publishes", topic, len(f.Publishes), n)
				return
			}
			p := Publish{Seq: seq, Topic: topic, Refused: refused}
			p.decodeEntry(d)
			f.Publishes = append(f.Publishes, p)
			seq++
		}
	}
}

// BufferPublishMulti appends p to the buffer like BufferPublish, but as part of a
// PUBLISH_MULTI frame: it continues the frame being built when p has the next seq and the
// frame stays within maxBody bytes of body and MaxBatchPublishes entries, extending the last
// run when p has its topic and opening a new run otherwise; else it closes that frame and
// opens a new one. A publish too large for an empty frame of maxBody goes as a PUBLISH frame.
// Only for nodes that read PUBLISH_MULTI (a connection of MultiVersion or later). It never
// writes.
func (w *Writer) BufferPublishMulti(p *Publish, maxBody int) {
	size := 4*binary.MaxVarintLen64 + len(p.ProducerID) + len(p.Payload)
	for _, h := range p.Headers {
		size += 2*binary.MaxVarintLen64 + len(h.Key) + len(h.Value)
	}
	sameRun := w.open == TypePublishMulti && p.Topic == w.pubTopic
	if !sameRun {
		size += 2*binary.MaxVarintLen64 + len(p.Topic) // a new run's topic and count
	}
	if w.open == TypePublishMulti && (p.Seq != w.pubNext || w.pubNext == 0 ||
		w.pubCount == MaxBatchPublishes || len(w.buf)-w.openStart-headerLen+size > maxBody) {
		w.closeOpen()
		sameRun = false
		size += 2*binary.MaxVarintLen64 + len(p.Topic)
	}
	if w.open != TypePublishMulti {
		w.closeOpen()
		if size+binary.MaxVarintLen64 > maxBody {
			w.buf = Append(w.buf, p)
			return
		}
		w.open, w.openStart = TypePublishMulti, len(w.buf)
		e := enc(append(w.buf, byte(TypePublishMulti), 0, 0, 0, 0))
		w.buf = e.uvarint(p.Seq)
		w.pubNext, w.pubCount = p.Seq, 0
	}
	if sameRun {
		w.setRunCount(w.pubRunCount + 1)
	} else {
		w.buf = enc(w.buf).str(p.Topic)
		w.pubTopic, w.pubRunAt, w.pubRunCount = p.Topic, len(w.buf), 0
		w.buf = append(w.buf, 0) // the run's count: one byte until it reaches 128 (setRunCount)
		w.setRunCount(1)
	}
	w.buf = p.appendEntry(enc(w.buf))
	w.pubNext++
	w.pubCount++
}

// setRunCount writes n as the open run's count at pubRunAt, which holds the old count's
// varint: a count of 128 or more (at most MaxBatchPublishes) takes two bytes, so the run's
// entries move up one byte the first time it reaches 128.
func (w *Writer) setRunCount(n int) {
	if n == 128 {
		w.buf = append(w.buf, 0)
		copy(w.buf[w.pubRunAt+2:], w.buf[w.pubRunAt+1:len(w.buf)-1])
	}
	binary.PutUvarint(w.buf[w.pubRunAt:], uint64(n))
	w.pubRunCount = n
}
