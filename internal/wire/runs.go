package wire

import (
	"encoding/binary"
	"math"
)

// RUNS (0x2b, protocol version 3) carries records of many topics in one frame: a wildcard
// replay of 100,000 topics of one record each moves in a few hundred frames instead of a
// TOPIC and a RECORD frame per topic (issue 35). Sent only on a connection of version 3 or
// later, to a subscription that set SubscribeRecords (docs/protocol.md, "RUNS").
//
// Body: time time (the base), origin_region string, then one or more entries until the body
// ends:
//
//	ref          varint   0: the record after the previous entry's, same topic index
//	                      (offset + 1); not in the first entry. >= 1: a new run, of topic
//	                      index (ref-1)>>1; when (ref-1)&1 is 1 a name follows, binding the
//	                      index as a TOPIC frame right before the entry would
//	[name        string]  new run with the bind bit only
//	[offset      varint]  new run only
//	time_delta   varint   zigzag: the entry's time minus the previous entry's (the base's)
//	origin       varint   new run: zigzag of origin_offset - offset (mod 2^64);
//	                      continuing: origin_offset minus the previous entry's minus 1
//	producer_id string, sequence varint, headers headers, payload bytes
//
// All entries share the frame's origin region. Each topic's records keep their offset order
// across entries and frames, as on any subscription stream; runs of different topics carry
// no order between them.

// TypeRuns is the type of the RUNS frame.
const TypeRuns Type = 0x2b

// RunsVersion is the first protocol version with RUNS frames.
const RunsVersion = 3

// maxRunIndex is the largest topic index a RUNS entry can bind (its ref, 2 x index + 2, is a
// uint64); a Writer sends a record of a larger index as TOPIC and RECORD frames.
const maxRunIndex = 1<<63 - 2

// Runs is a decoded RUNS frame (Decode and Reader.Read return it; the Decoder instead
// returns its records one by one as *Record). A record whose Bind is set binds its Index to
// that name before it, as a TOPIC frame would.
type Runs struct {
	Records []Record
}

func (*Runs) Type() Type { return TypeRuns }

func zigzag(v int64) uint64   { return uint64(v<<1) ^ uint64(v>>63) }
func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

// runState is the encoding or decoding state of a RUNS frame between entries.
type runState struct {
	index   uint64 // of the previous entry
	next    uint64 // its offset + 1
	wrapped bool   // next overflowed: no entry may continue the run
	time    int64  // of the previous entry, or the base
	origin  uint64 // origin offset of the previous entry
	inRun   bool   // an entry was decoded: ref 0 may follow
	region  string
}

// continues reports whether r can be encoded as the entry after the run's last one.
func (st *runState) continues(r *Record) bool {
	return st.inRun && r.Bind == "" && r.Index == st.index && r.Offset == st.next && !st.wrapped &&
		r.OriginOffset > st.origin
}

// appendRunEntry encodes r as the next entry after st, and advances st.
func appendRunEntry(e enc, st *runState, r *Record) enc {
	if st.continues(r) {
		e = e.uvarint(0).uvarint(zigzag(r.Time - st.time)).uvarint(r.OriginOffset - st.origin - 1)
	} else {
		ref := r.Index<<1 + 1
		if r.Bind != "" {
			e = e.uvarint(ref + 1).str(r.Bind)
		} else {
			e = e.uvarint(ref)
		}
		e = e.uvarint(r.Offset).uvarint(zigzag(r.Time - st.time)).uvarint(zigzag(int64(r.OriginOffset - r.Offset)))
	}
	if r.ProducerID == "" && r.Sequence == 0 && len(r.Headers) == 0 {
		e = append(e, 0, 0, 0)
	} else {
		e = e.str(r.ProducerID).uvarint(r.Sequence).headers(r.Headers)
	}
	e = e.bytes(r.Payload)
	st.index, st.next, st.time, st.origin, st.inRun = r.Index, r.Offset+1, r.Time, r.OriginOffset, true
	st.wrapped = st.next == 0
	return e
}

func (f *Runs) appendBody(e enc) enc {
	if len(f.Records) == 0 {
		return e // malformed on decoding; never built by a Writer
	}
	first := &f.Records[0]
	e = e.uvarint(uint64(first.Time)).str(first.OriginRegion)
	st := runState{time: first.Time}
	for i := range f.Records {
		e = appendRunEntry(e, &st, &f.Records[i])
	}
	return e
}

func (f *Runs) decodeBody(d *dec) {
	var st runState
	st.header(d)
	if d.err == nil && len(d.b) == 0 {
		d.fail("no records")
	}
	for d.err == nil && len(d.b) > 0 {
		var r Record
		st.entry(d, &r)
		f.Records = append(f.Records, r)
	}
}

func (st *runState) header(d *dec) {
	*st = runState{}
	st.time = int64(d.uvarint("time"))
	st.region = d.strSlot("origin region", slotRegion)
}

// entry decodes the next entry into r, checking that offsets, times and origin offsets do
// not overflow.
func (st *runState) entry(d *dec, r *Record) {
	ref := d.uvarint("ref")
	if d.err != nil {
		return
	}
	r.Bind = ""
	var offset, origin uint64
	var dt int64
	if ref == 0 {
		if !st.inRun {
			d.fail("the first entry continues no run (ref 0)")
			return
		}
		if st.wrapped {
			d.fail("offset past 2^64")
			return
		}
		offset = st.next
		dt = unzigzag(d.uvarint("time delta"))
		gap := d.uvarint("origin gap")
		if d.err != nil {
			return
		}
		if gap == math.MaxUint64 || st.origin+gap+1 < st.origin {
			d.fail("origin gap %d overflows", gap)
			return
		}
		origin = st.origin + gap + 1
	} else {
		r.Index = (ref - 1) >> 1
		if (ref-1)&1 == 1 {
			if r.Bind = d.str("name"); d.err == nil && r.Bind == "" {
				d.fail("empty topic name")
				return
			}
		}
		offset = d.uvarint("offset")
		dt = unzigzag(d.uvarint("time delta"))
		origin = offset + uint64(unzigzag(d.uvarint("origin skew")))
	}
	t := st.time + dt
	if (dt > 0 && t < st.time) || (dt < 0 && t > st.time) {
		d.fail("time delta %d overflows", dt)
		return
	}
	if ref == 0 {
		r.Index = st.index
	}
	r.ProducerID = d.strSlot("producer id", slotProducer)
	r.Sequence = d.uvarint("sequence")
	r.Headers = d.headers()
	r.Payload = d.bytesMax("payload", d.lim.MaxPayload)
	if d.err != nil {
		return
	}
	r.Offset, r.Time, r.OriginRegion, r.OriginOffset = offset, t, st.region, origin
	st.index, st.next, st.time, st.origin, st.inRun = r.Index, offset+1, t, origin, true
	st.wrapped = st.next == 0
}

// BufferRun appends r to the buffer as an entry of a RUNS frame: it continues the frame
// being built while r has its origin region, its time can be written as a delta from the
// previous entry's and the frame stays under 32 KiB; otherwise it closes that frame and opens
// a new one. r.Bind, when set, binds r.Index to that name in the entry (the caller sends no
// TOPIC frame for it). A record too large for an empty RUNS frame goes as a TOPIC frame (when
// r.Bind is set) and a RECORD frame. Only for streams of protocol version 3 or later whose
// reader accepts batched frames (Subscribe.Flags has SubscribeRecords). It never writes.
func (w *Writer) BufferRun(r *Record) {
	size := recordEntryMax(r) + len(r.Bind) + 2*binary.MaxVarintLen64
	if r.Index > maxRunIndex {
		w.closeOpen()
	}
	if w.open == TypeRuns {
		dt := r.Time - w.runs.time
		if r.OriginRegion != w.runs.region || (dt > 0) != (r.Time > w.runs.time) || (dt < 0) != (r.Time < w.runs.time) ||
			len(w.buf)-w.openStart-headerLen+size > maxRecordsBody {
			w.closeOpen()
		}
	}
	if w.open != TypeRuns {
		w.closeOpen()
		if size+2*binary.MaxVarintLen64+len(r.OriginRegion) > maxRecordsBody || r.Index > maxRunIndex {
			if r.Bind != "" {
				w.buf = Append(w.buf, &Topic{Index: r.Index, Name: r.Bind})
			}
			w.buf = Append(w.buf, r)
			return
		}
		w.open, w.openStart = TypeRuns, len(w.buf)
		e := enc(append(w.buf, byte(TypeRuns), 0, 0, 0, 0))
		w.buf = e.uvarint(uint64(r.Time)).str(r.OriginRegion)
		w.runs = runState{time: r.Time, region: r.OriginRegion}
	}
	w.buf = appendRunEntry(enc(w.buf), &w.runs, r)
}
