package wire

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Limits caps every length a peer controls. Zero fields take the defaults of DefaultLimits.
//
// Over MaxFrame, or over a limit in any frame but PUBLISH and PUBLISH_BATCH, a frame is not
// decoded (ErrFrameTooLarge, ErrMalformed). In a publish, the per-publish limits (MaxPayload,
// MaxHeaders, MaxHeaderBytes, MaxString for header keys and the producer id, MaxTopic) refuse
// that publish only: it decodes with Publish.Refused set, so one bad publish does not end a
// stream of pipelined good ones.
type Limits struct {
	MaxFrame       int // body bytes of one frame; default 1 MiB + 64 KiB (a node announces its own in WELCOME)
	MaxPayload     int // payload bytes of one record; default 1 MiB
	MaxHeaders     int // headers per record; default 64
	MaxHeaderBytes int // keys plus values of one record's headers; default 16 KiB
	MaxString      int // any other string (header key, pattern, names, messages); default 4 KiB
	MaxTopic       int // topic bytes of a PUBLISH or PUBLISH_BATCH; default MaxString
}

// DefaultLimits are the limits of a node and client that configure none.
func DefaultLimits() Limits {
	return Limits{
		MaxFrame:       1<<20 + 64<<10,
		MaxPayload:     1 << 20,
		MaxHeaders:     64,
		MaxHeaderBytes: 16 << 10,
		MaxString:      4 << 10,
		MaxTopic:       4 << 10,
	}
}

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits()
	if l.MaxFrame <= 0 {
		l.MaxFrame = d.MaxFrame
	}
	if l.MaxPayload <= 0 {
		l.MaxPayload = d.MaxPayload
	}
	if l.MaxHeaders <= 0 {
		l.MaxHeaders = d.MaxHeaders
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = d.MaxHeaderBytes
	}
	if l.MaxString <= 0 {
		l.MaxString = d.MaxString
	}
	if l.MaxTopic <= 0 {
		l.MaxTopic = l.MaxString
	}
	return l
}

// headerLen is the fixed frame header: type (1 byte) and body length (uint32 big-endian).
const headerLen = 5

// enc appends body fields. It is a plain byte slice so that encoding a frame is a few appends
// into a buffer the caller reuses.
type enc []byte

func (e enc) uvarint(v uint64) enc { return binary.AppendUvarint(e, v) }
func (e enc) byte1(v byte) enc     { return append(e, v) }
func (e enc) bytes(b []byte) enc   { return append(binary.AppendUvarint(e, uint64(len(b))), b...) }
func (e enc) str(s string) enc     { return append(binary.AppendUvarint(e, uint64(len(s))), s...) }

func (e enc) headers(hs []Header) enc {
	e = e.uvarint(uint64(len(hs)))
	for _, h := range hs {
		e = e.str(h.Key).bytes(h.Value)
	}
	return e
}

// dec reads body fields. The first error sticks; later reads return zero values, so decode
// functions read every field and check d.err once at the end.
type dec struct {
	b     []byte
	lim   *Limits
	typ   Type
	err   error
	what  string    // the field being read, for error messages
	cache *strCache // nil: every string is a new allocation
}

// strCache keeps the last string decoded into each slot, for the fields that repeat from one
// frame to the next of a stream (the topic of every PUBLISH, the origin region and producer
// of every RECORD): a repeated value is converted once instead of allocated per frame. It
// belongs to one stream's reading goroutine.
type strCache [numSlots]string

const (
	slotTopic = iota
	slotProducer
	slotRegion
	numSlots
)

// strSlot is str, reusing the previous string of slot when the bytes are the same.
func (d *dec) strSlot(field string, slot int) string {
	return d.intern(d.bytesMax(field, d.lim.MaxString), slot)
}

// intern converts b, reusing the previous string of slot when the bytes are the same.
func (d *dec) intern(b []byte, slot int) string {
	if d.cache == nil || len(b) == 0 {
		return string(b)
	}
	if s := d.cache[slot]; s == string(b) { // the comparison does not allocate
		return s
	}
	s := string(b)
	d.cache[slot] = s
	return s
}

// skipExtension skips what follows the last field this package knows of an extensible frame
// (WELCOME, TOPIC_INFO after its replicas, CONSUMER_INFO after its group fields): fields a
// later build added under the extension rule of version 2 (docs/protocol.md, "Versions").
func (d *dec) skipExtension() {
	if d.err == nil {
		d.b = d.b[len(d.b):]
	}
}

func (d *dec) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s: %s", ErrMalformed, d.typ, fmt.Sprintf(format, args...))
	}
}

func (d *dec) uvarint(field string) uint64 {
	// Most varints on the wire (indexes, lengths, small counters) are one byte: that case
	// skips binary.Uvarint's loop. It does not look at d.err: after an error every value
	// read is discarded with the frame.
	if b := d.b; len(b) > 0 && b[0] < 0x80 {
		d.b = b[1:]
		return uint64(b[0])
	}
	return d.uvarintSlow(field)
}

func (d *dec) uvarintSlow(field string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		if n == 0 {
			d.fail("%s: truncated", field)
		} else {
			d.fail("%s: varint overflows 64 bits", field)
		}
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) byte1(field string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 1 {
		d.fail("%s: truncated", field)
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

// bytesMax reads a length-prefixed byte string of at most max bytes. The result aliases the
// frame body, which the Reader allocates per frame for the frame types that keep such slices
// (aliasesBody), so it stays valid.
func (d *dec) bytesMax(field string, max int) []byte {
	if d.err != nil {
		return nil
	}
	// Inline varint read: building the field's error label here would allocate per field.
	n, w := binary.Uvarint(d.b)
	if w <= 0 {
		d.uvarint(field + " length") // records the precise error
		return nil
	}
	d.b = d.b[w:]
	if n > uint64(max) {
		d.fail("%s: %d bytes over the limit of %d", field, n, max)
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail("%s: declares %d bytes, %d left in frame", field, n, len(d.b))
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// span reads a length-prefixed byte string that has only to fit in the frame, for a field
// whose limit the caller checks itself (a publish's, which refuses the publish, not the
// frame). Like every read it checks the length before taking anything: the result aliases
// the body.
func (d *dec) span(field string) []byte { return d.bytesMax(field, math.MaxInt) }

func (d *dec) str(field string) string {
	return string(d.bytesMax(field, d.lim.MaxString))
}

func (d *dec) headers() []Header {
	n := d.uvarint("header count")
	if d.err != nil || n == 0 {
		return nil
	}
	if n > uint64(d.lim.MaxHeaders) {
		d.fail("%d headers over the limit of %d", n, d.lim.MaxHeaders)
		return nil
	}
	// Each header takes at least two bytes, so a count the body cannot hold is rejected
	// before the slice is allocated.
	if n*2 > uint64(len(d.b)) {
		d.fail("header count %d exceeds what %d bytes can hold", n, len(d.b))
		return nil
	}
	hs := make([]Header, 0, n)
	total := 0
	for i := uint64(0); i < n && d.err == nil; i++ {
		k := d.bytesMax("header key", d.lim.MaxHeaderBytes)
		v := d.bytesMax("header value", d.lim.MaxHeaderBytes)
		total += len(k) + len(v)
		if total > d.lim.MaxHeaderBytes {
			d.fail("headers: %d bytes over the limit of %d", total, d.lim.MaxHeaderBytes)
			return nil
		}
		hs = append(hs, Header{Key: string(k), Value: v})
	}
	return hs
}

func (d *dec) end() error {
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	return d.err
}
