package wire

import "encoding/binary"

// PUBLISH_BATCH (0x13) carries a run of publishes to one topic in one frame: the frame
// header, seq and topic once instead of once per record, one frame for the node to read and
// one body allocation for all its payloads. PUBLISH_ACKS (0x14) answers a run of them at once.
//
// PUBLISH_BATCH body: seq varint (the first publish's), topic string, then one or more
// entries until the body ends:
//
//	producer_id string, sequence varint, headers headers, payload bytes
//
// At most MaxBatchPublishes entries (so a frame of small entries cannot make the receiver
// build an array many times its size). Entry k is the publish of seq+k, answered as a PUBLISH of that seq would be. A node that has
// read a PUBLISH_BATCH on a stream may answer a run of consecutive successes on that stream
// with one PUBLISH_ACKS: seq varint, count varint (>= 1), offset varint, time time, meaning
// publishes seq .. seq+count-1 are durable at offsets offset .. offset+count-1, all with that
// time. Streams that never carried a PUBLISH_BATCH get only PUBLISH_ACK, as before.

// MaxBatchPublishes caps the entries of one PUBLISH_BATCH frame.
const MaxBatchPublishes = 1024

// PublishBatch is a decoded PUBLISH_BATCH frame. Publishes are its entries; decoding fills in
// each one's Seq (Seq+k) and Topic, so a receiver handles them as PUBLISH frames. Encoding
// uses the frame's Seq and Topic and only the entries' other fields.
type PublishBatch struct {
	Seq       uint64
	Topic     string
	Publishes []Publish
}

// PublishAcks says the publishes Seq .. Seq+Count-1 are durable at Offset .. Offset+Count-1,
// all with timestamp Time.
type PublishAcks struct {
	Seq    uint64
	Count  uint64
	Offset uint64
	Time   int64
}

func (*PublishBatch) Type() Type { return TypePublishBatch }
func (*PublishAcks) Type() Type  { return TypePublishAcks }

func (f *PublishBatch) appendBody(e enc) enc {
	e = e.uvarint(f.Seq).str(f.Topic)
	for i := range f.Publishes {
		e = f.Publishes[i].appendEntry(e)
	}
	return e
}

func (p *Publish) appendEntry(e enc) enc {
	return e.str(p.ProducerID).uvarint(p.Sequence).headers(p.Headers).bytes(p.Payload)
}

func (f *PublishBatch) decodeBody(d *dec) {
	f.Seq = d.uvarint("seq")
	var refused *Error // the frame's topic, over MaxTopic: every entry is refused
	f.Topic, refused = d.publishTopic()
	if d.err == nil && len(d.b) == 0 {
		d.fail("no publishes")
	}
	seq := f.Seq
	for d.err == nil && len(d.b) > 0 {
		if len(f.Publishes) > 0 && seq == 0 {
			d.fail("seq past 2^64")
			return
		}
		if len(f.Publishes) == MaxBatchPublishes {
			d.fail("more than %d publishes", MaxBatchPublishes)
			return
		}
		p := Publish{Seq: seq, Topic: f.Topic, Refused: refused}
		p.decodeEntry(d)
		f.Publishes = append(f.Publishes, p)
		seq++
	}
}

func (f *PublishAcks) appendBody(e enc) enc {
	return e.uvarint(f.Seq).uvarint(f.Count).uvarint(f.Offset).uvarint(uint64(f.Time))
}

func (f *PublishAcks) decodeBody(d *dec) {
	f.Seq = d.uvarint("seq")
	f.Count = d.uvarint("count")
	f.Offset = d.uvarint("offset")
	f.Time = int64(d.uvarint("time"))
	switch {
	case d.err != nil:
	case f.Count == 0:
		d.fail("count 0")
	case f.Seq+(f.Count-1) < f.Seq || f.Offset+(f.Count-1) < f.Offset:
		d.fail("%d publishes from seq %d at offset %d run past 2^64", f.Count, f.Seq, f.Offset)
	}
}

// BufferPublish appends p to the buffer like Buffer, but as part of a PUBLISH_BATCH frame: it
// continues the frame being built when p has the same topic and the next seq, and the frame
// stays within maxBody bytes of body and MaxBatchPublishes entries; otherwise it closes that frame and opens a new one. A
// publish too large for an empty batch of maxBody goes as a PUBLISH frame. Only for nodes
// that accept PUBLISH_BATCH. It never writes.
func (w *Writer) BufferPublish(p *Publish, maxBody int) {
	size := 4*binary.MaxVarintLen64 + len(p.ProducerID) + len(p.Payload)
	for _, h := range p.Headers {
		size += 2*binary.MaxVarintLen64 + len(h.Key) + len(h.Value)
	}
	if w.open == TypePublishBatch && (p.Topic != w.pubTopic || p.Seq != w.pubNext || w.pubNext == 0 ||
		w.pubCount == MaxBatchPublishes ||
		len(w.buf)-w.openStart-headerLen+size > maxBody) {
		w.closeOpen()
	}
	if w.open != TypePublishBatch {
		w.closeOpen()
		if size+2*binary.MaxVarintLen64+len(p.Topic) > maxBody {
			w.buf = Append(w.buf, p)
			return
		}
		w.open, w.openStart = TypePublishBatch, len(w.buf)
		e := enc(append(w.buf, byte(TypePublishBatch), 0, 0, 0, 0))
		w.buf = e.uvarint(p.Seq).str(p.Topic)
		w.pubTopic, w.pubNext, w.pubCount = p.Topic, p.Seq, 0
	}
	w.buf = p.appendEntry(enc(w.buf))
	w.pubNext++
	w.pubCount++
}
