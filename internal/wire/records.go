package wire

import (
	"encoding/binary"
	"math"
)

// RECORDS (0x26) carries a run of records of one topic in one frame, for subscriptions that
// asked for it (SubscribeRecords): one frame header, one topic index, one origin region and
// small deltas instead of a RECORD frame per record. With 100-byte records that is about a
// fifth fewer bytes on the stream (so fewer QUIC packets) and less decoding per record.
//
// Body: index varint, offset varint (the first record's), time time (the base), origin_region
// string, origin_offset varint (the base), then one or more entries until the body ends:
//
//	time_delta  varint   the record's time minus the previous record's (the base for the first)
//	origin_gap  varint   origin_offset minus the previous one minus 1 (minus the base for the first)
//	producer_id string, sequence varint, headers headers, payload bytes
//
// Entry k has offset offset+k. All records of a run share the topic and the origin region;
// times never decrease and origin offsets increase within it, as they do in a log.

// SubscribeRecords is the Subscribe flag by which a client accepts RECORDS frames.
const SubscribeRecords = 1 << 0

// maxRecordsBody bounds the RECORDS frames a Writer builds; a record that does not fit in an
// empty one goes in a RECORD frame of its own.
const maxRecordsBody = 32 << 10

// Records is a decoded RECORDS frame (Decode and Reader.Read return it; the Decoder instead
// returns its records one by one as *Record). Records must be a run as described above; each
// record's Index is the frame's Index.
type Records struct {
	Index   uint64
	Records []Record
}

func (*Records) Type() Type { return TypeRecords }

func (f *Records) appendBody(e enc) enc {
	if len(f.Records) == 0 {
		return e // malformed on decoding; never built by a Writer
	}
	first := &f.Records[0]
	e = e.uvarint(f.Index).uvarint(first.Offset).uvarint(uint64(first.Time)).str(first.OriginRegion).uvarint(first.OriginOffset)
	prevTime, prevOrigin := first.Time, first.OriginOffset-1
	for i := range f.Records {
		r := &f.Records[i]
		e = r.appendEntry(e, prevTime, prevOrigin)
		prevTime, prevOrigin = r.Time, r.OriginOffset
	}
	return e
}

// appendEntry encodes r as an entry after a record of time prevTime and origin offset
// prevOrigin (for the first entry: the base time, and the base origin offset minus 1).
func (r *Record) appendEntry(e enc, prevTime int64, prevOrigin uint64) enc {
	return e.uvarint(uint64(r.Time - prevTime)).uvarint(r.OriginOffset - prevOrigin - 1).
		str(r.ProducerID).uvarint(r.Sequence).headers(r.Headers).bytes(r.Payload)
}

func (f *Records) decodeBody(d *dec) {
	var run recordsRun
	run.header(d)
	f.Index = run.index
	if d.err == nil && len(d.b) == 0 {
		d.fail("no records")
	}
	for d.err == nil && len(d.b) > 0 {
		var r Record
		run.entry(d, &r)
		f.Records = append(f.Records, r)
	}
}

// recordsRun is the decoding state of a RECORDS frame between entries.
type recordsRun struct {
	index      uint64
	next       uint64 // offset of the next entry
	wrapped    bool   // next overflowed: no entry may follow
	time       int64  // of the previous entry, or the base
	region     string
	origin     uint64 // origin offset of the previous entry, or the base
	originBase bool   // origin is the base (no entry decoded yet)
}

func (run *recordsRun) header(d *dec) {
	run.index = d.uvarint("index")
	run.next = d.uvarint("offset")
	run.time = int64(d.uvarint("time"))
	run.region = d.strSlot("origin region", slotRegion)
	run.origin = d.uvarint("origin offset")
	run.originBase = true
	run.wrapped = false
}

// entry decodes the next entry into r, checking that offsets, times and origin offsets do
// not overflow.
func (run *recordsRun) entry(d *dec, r *Record) {
	var dt, gap uint64
	if !simpleEntry(d, r, &dt, &gap) {
		dt, gap = entryFields(d, r)
	}
	if d.err != nil {
		return
	}
	if run.wrapped {
		d.fail("offset past 2^64")
		return
	}
	t := run.time + int64(dt)
	if dt > math.MaxInt64 || t < run.time {
		d.fail("time delta %d overflows", dt)
		return
	}
	step := gap + 1
	if run.originBase {
		step = gap
	}
	if step < gap || run.origin+step < run.origin {
		d.fail("origin gap %d overflows", gap)
		return
	}
	r.Index, r.Offset, r.Time = run.index, run.next, t
	r.OriginRegion, r.OriginOffset = run.region, run.origin+step
	run.time, run.origin, run.originBase = t, r.OriginOffset, false
	run.next++
	run.wrapped = run.next == 0
}

// entryFields decodes the fields of an entry into r and returns its time delta and origin
// gap: the general path, for any entry.
func entryFields(d *dec, r *Record) (dt, gap uint64) {
	dt = d.uvarint("time delta")
	gap = d.uvarint("origin gap")
	r.ProducerID = d.strSlot("producer id", slotProducer)
	r.Sequence = d.uvarint("sequence")
	r.Headers = d.headers()
	r.Payload = d.bytesMax("payload", d.lim.MaxPayload)
	return dt, gap
}

// simpleEntry decodes the entry most logs are made of (a time delta and an origin gap under
// 128, no producer, no sequence, no headers) without the general path's per-field calls, and
// reports whether it did; for any other entry, or bytes that are not well formed, it leaves
// d alone and the general path decodes it (and finds any error). Both give the same record.
func simpleEntry(d *dec, r *Record, dt, gap *uint64) bool {
	b := d.b
	if len(b) < 6 || b[0] >= 0x80 || b[1] >= 0x80 || b[2] != 0 || b[3] != 0 || b[4] != 0 {
		return false
	}
	n, w := uint64(b[5]), 1
	if n >= 0x80 {
		if n, w = binary.Uvarint(b[5:]); w <= 0 {
			return false
		}
	}
	rest := b[5+w:]
	if n > uint64(len(rest)) || n > uint64(d.lim.MaxPayload) {
		return false
	}
	*dt, *gap = uint64(b[0]), uint64(b[1])
	r.ProducerID, r.Sequence, r.Headers = "", 0, nil
	r.Payload = rest[:n:n]
	d.b = rest[n:]
	return true
}

// BufferRecord appends r to the buffer like Buffer, but as part of a RECORDS frame: it
// continues the frame being built when r is the next record of the same topic index and
// origin region, with a time and origin offset that do not go back, and the frame stays under
// 32 KiB; otherwise it closes that frame and opens a new one. A record too large for an empty
// RECORDS frame goes as a RECORD frame. Only for streams whose reader accepts RECORDS
// (Subscribe.Flags has SubscribeRecords). It never writes.
func (w *Writer) BufferRecord(r *Record) {
	simple := r.ProducerID == "" && r.Sequence == 0 && len(r.Headers) == 0
	size := 5*binary.MaxVarintLen64 + len(r.Payload)
	if !simple {
		size = recordEntryMax(r)
	}
	if w.open == TypeRecords && (r.Index != w.run.index || r.Offset != w.run.next || w.run.wrapped ||
		r.OriginRegion != w.run.region || r.Time < w.run.time || r.Time-w.run.time < 0 ||
		r.OriginOffset <= w.run.origin || len(w.buf)-w.openStart-headerLen+size > maxRecordsBody) {
		w.closeOpen()
	}
	if w.open != TypeRecords {
		w.closeOpen()
		if size+4*binary.MaxVarintLen64+len(r.OriginRegion) > maxRecordsBody {
			w.buf = Append(w.buf, r)
			return
		}
		w.open, w.openStart = TypeRecords, len(w.buf)
		e := enc(append(w.buf, byte(TypeRecords), 0, 0, 0, 0))
		w.buf = e.uvarint(r.Index).uvarint(r.Offset).uvarint(uint64(r.Time)).str(r.OriginRegion).uvarint(r.OriginOffset)
		// The base origin offset minus 1 (wrapping at 0): the first entry's gap is then 0.
		w.run = recordsRun{index: r.Index, next: r.Offset, time: r.Time, region: r.OriginRegion, origin: r.OriginOffset - 1}
	}
	if simple {
		// The common entry, written without the general path's per-field appends.
		b := binary.AppendUvarint(w.buf, uint64(r.Time-w.run.time))
		b = append(binary.AppendUvarint(b, r.OriginOffset-w.run.origin-1), 0, 0, 0)
		w.buf = append(binary.AppendUvarint(b, uint64(len(r.Payload))), r.Payload...)
	} else {
		w.buf = r.appendEntry(enc(w.buf), w.run.time, w.run.origin)
	}
	w.run.time, w.run.origin = r.Time, r.OriginOffset
	w.run.next++
	w.run.wrapped = w.run.next == 0
}

// recordEntryMax bounds the encoded size of r's entry.
func recordEntryMax(r *Record) int {
	n := 5*binary.MaxVarintLen64 + len(r.ProducerID) + len(r.Payload)
	for _, h := range r.Headers {
		n += 2*binary.MaxVarintLen64 + len(h.Key) + len(h.Value)
	}
	return n
}

// closeOpen ends the RECORDS or PUBLISH_BATCH frame being built, if any, by writing its
// length.
func (w *Writer) closeOpen() {
	if w.open == 0 {
		return
	}
	binary.BigEndian.PutUint32(w.buf[w.openStart+1:], uint32(len(w.buf)-w.openStart-headerLen))
	w.open = 0
}
