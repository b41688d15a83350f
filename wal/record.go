package wal

import (
	"encoding/binary"
	"hash/crc32"
	"math/bits"

	"github.com/quicmq/quicmq/internal/wire"
)

// Header is one record header (a string key, a byte value; keys need not be unique). It is
// the codec's type, so headers pass between the wire and the log without conversion.
type Header = wire.Header

// Record is one entry of a topic's log.
type Record struct {
	// Offset is assigned by Append: dense, 0,1,2,... per topic.
	Offset uint64
	// Time is unix nanoseconds, assigned by Append: max(now, previous
	// record's Time), so it never decreases within a log. All records of one
	// request get the same Time.
	Time int64
	// OriginRegion is "" for a record published in this region (federation
	// fills it in for mirrored records).
	OriginRegion string
	// OriginOffset is the offset in the origin region's log; Append sets it
	// to Offset when OriginRegion is "".
	OriginOffset uint64
	// ProducerID and Sequence are optional. With both set (Sequence > 0) on a
	// record of this region, Append stores each (topic, ProducerID,
	// Sequence) once (dedup.go).
	ProducerID string
	Sequence   uint64
	Headers    []Header
	Payload    []byte
}

// Record value layout, version 1 (all integers little endian unless noted):
//
//	crc32c  u32   over the record key, then every value byte after the CRC
//	version u8    = 1
//	flags   u8    flagOrigin | flagProducer | flagHeaders
//	time    i64   unix nanoseconds (fixed position: OffsetForTime reads only this)
//	pos     u64   byte position: stored bytes of the topic before this record
//	[uvarint len, OriginRegion, uvarint OriginOffset]  if flagOrigin
//	[uvarint len, ProducerID, uvarint Sequence]        if flagProducer
//	[uvarint count, {uvarint len, key, uvarint len, value}...] if flagHeaders
//	payload (the rest of the value)
const (
	recordVersion  = 1
	recordFixedLen = 4 + 1 + 1 + 8 + 8
	offTime        = 6
	offPos         = 14

	flagOrigin   = 1 << 0
	flagProducer = 1 << 1
	flagHeaders  = 1 << 2
	knownFlags   = flagOrigin | flagProducer | flagHeaders
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Key prefixes; see the package doc.
const (
	prefixConfig    = 'c'
	prefixNextID    = 'i'
	prefixRecord    = 'm'
	prefixPosition  = 'p'
	prefixRetention = 'r'
	prefixTopic     = 't'
)

const recordKeyLen = 1 + 4 + 8

func putRecordKey(dst []byte, id uint32, off uint64) {
	dst[0] = prefixRecord
	binary.BigEndian.PutUint32(dst[1:5], id)
	binary.BigEndian.PutUint64(dst[5:13], off)
}

func recordKey(id uint32, off uint64) []byte {
	k := make([]byte, recordKeyLen)
	putRecordKey(k, id, off)
	return k
}

// parseRecordKey returns the topic ID and offset of a record key.
func parseRecordKey(k []byte) (id uint32, off uint64, ok bool) {
	if len(k) != recordKeyLen || k[0] != prefixRecord {
		return 0, 0, false
	}
	return binary.BigEndian.Uint32(k[1:5]), binary.BigEndian.Uint64(k[5:13]), true
}

func uvarintLen(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

// encodedLen is the length of r's encoded value. It does not depend on the
// fields the committer fills in (offset, time, position), so callers compute
// it before queueing.
func encodedLen(r *Record) int {
	n := recordFixedLen + len(r.Payload)
	if r.OriginRegion != "" {
		n += uvarintLen(uint64(len(r.OriginRegion))) + len(r.OriginRegion) + uvarintLen(r.OriginOffset)
	}
	if r.ProducerID != "" || r.Sequence != 0 {
		n += uvarintLen(uint64(len(r.ProducerID))) + len(r.ProducerID) + uvarintLen(r.Sequence)
	}
	if len(r.Headers) > 0 {
		n += uvarintLen(uint64(len(r.Headers)))
		for i := range r.Headers {
			h := &r.Headers[i]
			n += uvarintLen(uint64(len(h.Key))) + len(h.Key) + uvarintLen(uint64(len(h.Value))) + len(h.Value)
		}
	}
	return n
}

// encodeRecord writes r's value into dst, which must be exactly
// encodedLen(r) long, with the given time and byte position, and seals it
// with a CRC over key and value.
func encodeRecord(dst, key []byte, r *Record, time int64, pos uint64) {
	var flags byte
	dst[4] = recordVersion
	binary.LittleEndian.PutUint64(dst[offTime:], uint64(time))
	binary.LittleEndian.PutUint64(dst[offPos:], pos)
	i := recordFixedLen
	if r.OriginRegion != "" {
		flags |= flagOrigin
		i += binary.PutUvarint(dst[i:], uint64(len(r.OriginRegion)))
		i += copy(dst[i:], r.OriginRegion)
		i += binary.PutUvarint(dst[i:], r.OriginOffset)
	}
	if r.ProducerID != "" || r.Sequence != 0 {
		flags |= flagProducer
		i += binary.PutUvarint(dst[i:], uint64(len(r.ProducerID)))
		i += copy(dst[i:], r.ProducerID)
		i += binary.PutUvarint(dst[i:], r.Sequence)
	}
	if len(r.Headers) > 0 {
		flags |= flagHeaders
		i += binary.PutUvarint(dst[i:], uint64(len(r.Headers)))
		for j := range r.Headers {
			h := &r.Headers[j]
			i += binary.PutUvarint(dst[i:], uint64(len(h.Key)))
			i += copy(dst[i:], h.Key)
			i += binary.PutUvarint(dst[i:], uint64(len(h.Value)))
			i += copy(dst[i:], h.Value)
		}
	}
	dst[5] = flags
	copy(dst[i:], r.Payload)
	binary.LittleEndian.PutUint32(dst[0:4], recordCRC(key, dst))
}

func recordCRC(key, val []byte) uint32 {
	c := crc32.Update(0, castagnoli, key)
	return crc32.Update(c, castagnoli, val[4:])
}

// checkRecord verifies the CRC and fixed header of a stored value and
// returns its time and byte position. The empty reason means valid.
func checkRecord(key, val []byte) (time int64, pos uint64, reason string) {
	if len(val) < recordFixedLen {
		return 0, 0, "value too short"
	}
	if binary.LittleEndian.Uint32(val[0:4]) != recordCRC(key, val) {
		return 0, 0, "checksum mismatch"
	}
	if val[4] != recordVersion {
		return 0, 0, "unknown version"
	}
	if val[5]&^knownFlags != 0 {
		return 0, 0, "unknown flags"
	}
	return int64(binary.LittleEndian.Uint64(val[offTime:])), binary.LittleEndian.Uint64(val[offPos:]), ""
}

// slab hands out copies of small byte slices from shared chunks, so decoding
// a batch of records costs a few allocations instead of one per payload. It
// also keeps the last origin region and producer ID decoded, which repeat from
// record to record, so that each is converted to a string once per batch.
type slab struct {
	buf              []byte
	region, producer string
	alias            bool // copy returns its argument: for ReadFunc, whose records live in the callback only
}

// str returns b as a string, reusing *last when it has the same bytes.
func (s *slab) str(b []byte, last *string) string {
	if *last == string(b) { // the comparison does not allocate
		return *last
	}
	*last = string(b)
	return *last
}

const slabChunk = 64 << 10

func (s *slab) copy(b []byte) []byte {
	if s.alias {
		return b
	}
	if len(b) > slabChunk/4 {
		return append(make([]byte, 0, len(b)), b...)
	}
	if cap(s.buf)-len(s.buf) < len(b) {
		s.buf = make([]byte, 0, slabChunk)
	}
	start := len(s.buf)
	s.buf = append(s.buf, b...)
	return s.buf[start:len(s.buf):len(s.buf)]
}

// decodeRecord decodes a stored record. Bytes from disk are untrusted: every
// length is checked, nothing panics, and the result shares no memory with
// key or val. The empty reason means valid.
func decodeRecord(key, val []byte, s *slab) (rec Record, reason string) {
	_, off, ok := parseRecordKey(key)
	if !ok {
		return Record{}, "malformed key"
	}
	t, _, reason := checkRecord(key, val)
	if reason != "" {
		return Record{}, reason
	}
	rec.Offset = off
	rec.Time = t
	rec.OriginOffset = off
	flags := val[5]
	d := decoder{b: val[recordFixedLen:]}
	if flags&flagOrigin != 0 {
		rec.OriginRegion = s.str(d.bytes(), &s.region)
		rec.OriginOffset = d.uvarint()
		if d.bad == "" && rec.OriginRegion == "" {
			d.bad = "empty origin region"
		}
	}
	if flags&flagProducer != 0 {
		rec.ProducerID = s.str(d.bytes(), &s.producer)
		rec.Sequence = d.uvarint()
		if d.bad == "" && rec.ProducerID == "" && rec.Sequence == 0 {
			d.bad = "empty producer"
		}
	}
	if flags&flagHeaders != 0 {
		n := d.uvarint()
		// Each header takes at least two bytes: bound the allocation by
		// what the value can hold.
		if d.bad == "" && (n == 0 || n > uint64(len(d.b))/2) {
			d.bad = "bad header count"
		}
		if d.bad == "" {
			rec.Headers = make([]Header, n)
			for i := range rec.Headers {
				rec.Headers[i].Key = d.str()
				rec.Headers[i].Value = s.copy(d.bytes())
			}
		}
	}
	if d.bad != "" {
		return Record{}, d.bad
	}
	rec.Payload = s.copy(d.b)
	return rec, ""
}

// decoder reads varint-prefixed fields; the first problem sticks in bad.
type decoder struct {
	b   []byte
	bad string
}

func (d *decoder) uvarint() uint64 {
	if d.bad != "" {
		return 0
	}
	x, n := binary.Uvarint(d.b)
	if n <= 0 || n != uvarintLen(x) { // canonical only: one encoding per value
		d.bad = "bad varint"
		return 0
	}
	d.b = d.b[n:]
	return x
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.bad != "" {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.bad = "length past end of value"
		return nil
	}
	b := d.b[:n]
	d.b = d.b[n:]
	return b
}

func (d *decoder) str() string { return string(d.bytes()) }

// Metadata values (topic IDs, retention state, positions, topic configs, the
// topic ID counter) share one frame: crc32c u32 (over key, then the value after
// the CRC) | version u8 | payload. Version 1 is every kind's first layout; a
// kind whose layout changed reads its old versions too (positions: v1 and v2).
const metaVersion = 1

func sealMeta(key, payload []byte) []byte { return sealMetaVersion(key, metaVersion, payload) }

// metaHeader is the room sealMetaInPlace fills: a value built after it is sealed without a
// copy.
var metaHeader = [5]byte{4: metaVersion}

// sealMetaInPlace seals v, built as metaHeader then the payload, as sealMeta would the
// payload alone, and returns it.
func sealMetaInPlace(key, v []byte) []byte {
	v[4] = metaVersion
	binary.LittleEndian.PutUint32(v[0:4], recordCRC(key, v))
	return v
}

func sealMetaVersion(key []byte, version byte, payload []byte) []byte {
	v := make([]byte, 5+len(payload))
	v[4] = version
	copy(v[5:], payload)
	binary.LittleEndian.PutUint32(v[0:4], recordCRC(key, v))
	return v
}

// openMeta checks a version-1 metadata value and returns its payload
// (aliasing val).
func openMeta(key, val []byte, payloadLen int) ([]byte, string) {
	version, p, reason := openMetaAny(key, val)
	switch {
	case reason != "":
		return nil, reason
	case version != metaVersion:
		return nil, "unknown metadata version"
	case len(p) != payloadLen:
		return nil, "bad metadata length"
	}
	return p, ""
}

// openMetaAny checks a metadata value's frame and CRC and returns its version
// and payload (aliasing val); the caller checks the payload per version.
func openMetaAny(key, val []byte) (byte, []byte, string) {
	if len(val) < 5 {
		return 0, nil, "bad metadata length"
	}
	if binary.LittleEndian.Uint32(val[0:4]) != recordCRC(key, val) {
		return 0, nil, "metadata checksum mismatch"
	}
	return val[4], val[5:], ""
}

func topicKey(name string) []byte {
	k := make([]byte, 1+len(name))
	k[0] = prefixTopic
	copy(k[1:], name)
	return k
}

func retentionKey(id uint32) []byte {
	k := make([]byte, 5)
	k[0] = prefixRetention
	binary.BigEndian.PutUint32(k[1:], id)
	return k
}

func configKey(id uint32) []byte {
	k := make([]byte, 5)
	k[0] = prefixConfig
	binary.BigEndian.PutUint32(k[1:], id)
	return k
}

// nextIDKey holds the topic ID counter: every ID below it was handed out once.
var nextIDKey = []byte{prefixNextID}

func positionKey(topic, name string) []byte {
	return append(positionTopicPrefix(topic), name...)
}

// positionTopicPrefix is the common prefix of every position key of topic. The
// length in front keeps "ab" from prefixing "abc".
func positionTopicPrefix(topic string) []byte {
	k := make([]byte, 0, 1+binary.MaxVarintLen64+len(topic)+MaxNameLen)
	k = append(k, prefixPosition)
	k = binary.AppendUvarint(k, uint64(len(topic)))
	return append(k, topic...)
}

// prefixEnd returns the smallest key above every key that starts with p (p is
// never all 0xff here: every prefix starts with a letter).
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// parsePositionKey is the inverse of positionKey.
func parsePositionKey(k []byte) (topic, name string, ok bool) {
	if len(k) < 2 || k[0] != prefixPosition {
		return "", "", false
	}
	n, w := binary.Uvarint(k[1:])
	if w <= 0 || n > uint64(len(k)-1-w) {
		return "", "", false
	}
	rest := k[1+w:]
	return string(rest[:n]), string(rest[n:]), true
}
