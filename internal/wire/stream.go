package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Append encodes f as one frame (header and body) onto dst.
func Append(dst []byte, f Frame) []byte {
	start := len(dst)
	dst = append(dst, byte(f.Type()), 0, 0, 0, 0)
	dst = f.appendBody(enc(dst))
	binary.BigEndian.PutUint32(dst[start+1:], uint32(len(dst)-start-headerLen))
	return dst
}

// Decode decodes the first frame in b and returns it with the number of bytes it used.
// An incomplete frame returns io.ErrUnexpectedEOF (and no bytes used) so that callers with
// their own buffering can wait for more; a declared length over lim.MaxFrame returns
// ErrFrameTooLarge before any body byte is needed.
func Decode(b []byte, lim Limits) (Frame, int, error) {
	lim = lim.WithDefaults()
	t, n, err := frameAt(b, &lim)
	if err != nil {
		return nil, 0, err
	}
	body := make([]byte, n)
	copy(body, b[headerLen:headerLen+n])
	f, err := decodeBody(new(dec), t, body, &lim, nil)
	if err != nil {
		return nil, 0, err
	}
	return f, headerLen + n, nil
}

// frameAt checks the header of the frame at the start of b and that its body is complete.
func frameAt(b []byte, lim *Limits) (Type, int, error) {
	if len(b) < headerLen {
		return 0, 0, io.ErrUnexpectedEOF
	}
	t, n, err := parseHeader(b[:headerLen], lim)
	if err != nil {
		return 0, 0, err
	}
	if len(b)-headerLen < n {
		return 0, 0, io.ErrUnexpectedEOF
	}
	return t, n, nil
}

// Decoder decodes the frames of one stream from the caller's buffer, like Decode, but
// without Decode's per-frame costs on the hot path of a subscription: a RECORD frame is
// decoded into one Record the Decoder reuses, its byte slices aliasing the caller's buffer
// instead of a copy of the body, and repeated strings (origin region, producer) are
// converted once. A RECORDS or RUNS frame comes back one record at a time, as *Record too
// (a RUNS entry that binds its topic index carries the name in Record.Bind); a
// PUBLISH_ACK as one *PublishAck the Decoder reuses (a publisher's answers, one per record). One
// goroutine owns a Decoder.
type Decoder struct {
	lim   Limits
	cache strCache
	rec   Record
	ack   PublishAck
	run   recordsRun // of the RECORDS frame being returned record by record
	runs  runState   // of the RUNS frame being returned record by record
	open  Type       // TypeRecords or TypeRuns: the frame left belongs to
	left  int        // its body bytes not yet decoded; 0 outside one
	dc    dec        // decodeBody's state, kept here: a TOPIC, GAP ... frame allocates no dec
}

// NewDecoder returns a Decoder enforcing lim (zero fields take defaults).
func NewDecoder(lim Limits) *Decoder { return &Decoder{lim: lim.WithDefaults()} }

// Decode is Decode(b, lim), except that a RECORD frame comes back as the Decoder's own
// *Record (and a PUBLISH_ACK as its own *PublishAck): it is overwritten by the next call, and its Payload and header values alias b.
// A caller that keeps them past the next change of b copies them first. A RECORDS or RUNS frame
// (checked to be complete, like any frame) comes back as one *Record per call: the first
// call uses the frame header and the first record's bytes, each later call the next
// record's, so the caller passes the bytes that follow what was used, as for frames. A
// malformed record ends decoding with an error after the records before it were returned.
func (d *Decoder) Decode(b []byte) (Frame, int, error) {
	if d.left > 0 {
		return d.entry(b, 0)
	}
	t, n, err := frameAt(b, &d.lim)
	if err != nil {
		return nil, 0, err
	}
	switch t {
	case TypePublishAck:
		dc := dec{b: b[headerLen : headerLen+n : headerLen+n], lim: &d.lim, typ: t}
		d.ack.decodeBody(&dc)
		if err := dc.end(); err != nil {
			return nil, 0, err
		}
		return &d.ack, headerLen + n, nil
	case TypeRecord:
		dc := dec{b: b[headerLen : headerLen+n : headerLen+n], lim: &d.lim, typ: t, cache: &d.cache}
		d.rec.decodeBody(&dc)
		if err := dc.end(); err != nil {
			d.rec = Record{}
			return nil, 0, err
		}
		return &d.rec, headerLen + n, nil
	case TypeRecords:
		dc := dec{b: b[headerLen : headerLen+n : headerLen+n], lim: &d.lim, typ: t, cache: &d.cache}
		d.run.header(&dc)
		if dc.err == nil && len(dc.b) == 0 {
			dc.fail("no records")
		}
		if dc.err != nil {
			return nil, 0, dc.err
		}
		used := headerLen + n - len(dc.b)
		d.left, d.open = len(dc.b), TypeRecords
		return d.entry(b[used:], used)
	case TypeRuns:
		dc := dec{b: b[headerLen : headerLen+n : headerLen+n], lim: &d.lim, typ: t, cache: &d.cache}
		d.runs.header(&dc)
		if dc.err == nil && len(dc.b) == 0 {
			dc.fail("no records")
		}
		if dc.err != nil {
			return nil, 0, dc.err
		}
		used := headerLen + n - len(dc.b)
		d.left, d.open = len(dc.b), TypeRuns
		return d.entry(b[used:], used)
	}
	body := b[headerLen : headerLen+n : headerLen+n]
	if aliasesBody(t) {
		body = append([]byte(nil), body...)
	}
	f, err := decodeBody(&d.dc, t, body, &d.lim, &d.cache)
	if err != nil {
		return nil, 0, err
	}
	return f, headerLen + n, nil
}

// entry decodes the next record of the current RECORDS or RUNS frame from b, which starts
// with it; used is what the call already used of b's caller's bytes (the frame header).
func (d *Decoder) entry(b []byte, used int) (Frame, int, error) {
	if len(b) < d.left {
		left := d.left
		d.left = 0
		return nil, 0, fmt.Errorf("%w: %s: %d bytes of the frame given, %d left in it", ErrMalformed, d.open, len(b), left)
	}
	dc := dec{b: b[:d.left:d.left], lim: &d.lim, typ: d.open, cache: &d.cache}
	if d.open == TypeRuns {
		d.runs.entry(&dc, &d.rec)
	} else {
		d.rec.Bind = ""
		d.run.entry(&dc, &d.rec)
	}
	if dc.err != nil {
		d.left = 0
		d.rec = Record{}
		return nil, 0, dc.err
	}
	k := d.left - len(dc.b)
	d.left = len(dc.b)
	return &d.rec, used + k, nil
}

// knownType[t] says whether t is a frame type: newFrame's answer without its allocation.
var knownType = func() (k [256]bool) {
	for t := range typeNames {
		k[t] = true
	}
	return k
}()

func parseHeader(h []byte, lim *Limits) (Type, int, error) {
	t := Type(h[0])
	n := binary.BigEndian.Uint32(h[1:headerLen])
	if !knownType[t] {
		return t, 0, fmt.Errorf("%w: unknown frame type 0x%02x", ErrMalformed, byte(t))
	}
	if uint64(n) > uint64(lim.MaxFrame) {
		return t, 0, fmt.Errorf("%w: %s frame declares %d bytes, limit %d", ErrFrameTooLarge, t, n, lim.MaxFrame)
	}
	return t, int(n), nil
}

// decodeBody parses body as a frame of type t, with d as its state. Decoded byte slices
// alias body. d is the caller's (a Decoder's or Reader's own): given to a frame's method
// through the Frame interface, a dec made here escaped, one allocation per frame (a
// wildcard over 100,000 topics reads 100,000 TOPIC frames).
func decodeBody(d *dec, t Type, body []byte, lim *Limits, cache *strCache) (Frame, error) {
	f := newFrame(t)
	*d = dec{b: body, lim: lim, typ: t, cache: cache}
	defer func() { d.b = nil }() // holds no body between frames
	f.decodeBody(d)
	if err := d.end(); err != nil {
		return nil, err
	}
	return f, nil
}

// Reader reads frames from a stream. It is not safe for concurrent use: one goroutine owns
// each stream's reading side.
type Reader struct {
	r       *bufio.Reader
	lim     Limits
	hdr     [headerLen]byte
	cache   strCache // repeated topics and producers are converted once
	scratch []byte   // body of the last frame whose decoded value does not alias it
	dc      dec      // decodeBody's state (no allocation per frame)
	// reuse: RAFT_BATCH bodies of up to this many bytes are read into body, kept
	// between Reads (ReuseRaftBodies); 0: each gets a body of its own.
	reuse int
	body  []byte
}

// ReuseRaftBodies makes the Reader read the body of each RAFT_BATCH frame of up to max
// bytes into one buffer it keeps between Reads, instead of a new one per frame: for a raft
// stream whose reader is done with a batch (it decodes it into messages of their own)
// before its next Read. The RaftBatch a Read returns is then valid only until the next
// Read. Why: a follower under load receives batches of up to 16 MB, 25-45 a second, and a
// new body each time landed on memory new to the process (a page fault per 4 KiB, about
// 20 µs each on this project's VMs).
func (r *Reader) ReuseRaftBodies(max int) { r.reuse = max }

// maxScratch bounds the body buffer a Reader keeps between frames.
const maxScratch = 4 << 10

// aliasesBody reports whether a decoded frame of type t keeps slices of its body (payloads,
// header values: every frame type whose decoder calls bytesMax or headers), which then needs
// a body of its own per frame. A new frame type with a bytes field must be added here.
func aliasesBody(t Type) bool {
	return t == TypePublish || t == TypePublishBatch || t == TypePublishMulti || t == TypeRecord || t == TypeRecords || t == TypeRuns || t == TypeRaftBatch || t == TypeRaftChunk
}

// NewReader returns a Reader enforcing lim (zero fields take defaults), buffering 16 KiB.
func NewReader(r io.Reader, lim Limits) *Reader { return NewReaderSize(r, lim, 16<<10) }

// NewReaderSize returns a Reader with a buffer of size bytes: small for streams that carry
// little (a subscription's ACKs), as frames larger than the buffer are read past it.
func NewReaderSize(r io.Reader, lim Limits, size int) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, size), lim: lim.WithDefaults()}
}

// Read returns the next frame. At a clean end of stream (between frames) it returns io.EOF;
// a stream that ends inside a frame returns io.ErrUnexpectedEOF. The body is allocated only
// after its declared length passed the limit check.
func (r *Reader) Read() (Frame, error) {
	if _, err := io.ReadFull(r.r, r.hdr[:1]); err != nil {
		return nil, err // io.EOF between frames, or the stream's error
	}
	if _, err := io.ReadFull(r.r, r.hdr[1:]); err != nil {
		return nil, noEOF(err)
	}
	t, n, err := parseHeader(r.hdr[:], &r.lim)
	if err != nil {
		return nil, err
	}
	var body []byte
	if t == TypeRaftBatch && n <= r.reuse {
		if cap(r.body) < n {
			r.body = make([]byte, max(n, min(2*cap(r.body), r.reuse)))
		}
		body = r.body[:n]
	} else if aliasesBody(t) || n > maxScratch {
		body = make([]byte, n)
	} else {
		if cap(r.scratch) < n {
			r.scratch = make([]byte, max(n, 256))
		}
		body = r.scratch[:n]
	}
	if _, err := io.ReadFull(r.r, body); err != nil {
		return nil, noEOF(err)
	}
	return decodeBody(&r.dc, t, body, &r.lim, &r.cache)
}

// Bytes returns the stream's remaining bytes, starting with what the Reader has buffered,
// for a caller that passes the rest of the stream through unparsed.
func (r *Reader) Bytes() io.Reader { return r.r }

// Buffered is the number of bytes read from the stream but not yet decoded.
func (r *Reader) Buffered() int { return r.r.Buffered() }

// FrameBuffered reports whether a whole frame is already buffered, so that a reader that
// batches work can tell "the next Read will not block" from "it may".
func (r *Reader) FrameBuffered() bool {
	b := r.r.Buffered()
	if b < headerLen {
		return false
	}
	h, err := r.r.Peek(headerLen)
	if err != nil {
		return false
	}
	return uint64(b) >= headerLen+uint64(binary.BigEndian.Uint32(h[1:]))
}

func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Writer buffers frames for one stream; Flush sends them. One goroutine owns each Writer.
type Writer struct {
	w   io.Writer
	buf []byte

	// The RECORDS (BufferRecord), RUNS (BufferRun), PUBLISH_BATCH (BufferPublish) or PUBLISH_MULTI
	// (BufferPublishMulti) frame being built: open is
	// its type (0: none), it starts at buf[openStart], and its length is written when it is
	// closed (by any other method).
	open      Type
	openStart int
	run       recordsRun // of the open RECORDS frame
	runs      runState   // of the open RUNS frame
	pubTopic  string     // of the open PUBLISH_BATCH frame
	pubNext   uint64     // the seq its next entry must have
	pubCount  int        // its entries
	// Of the open PUBLISH_MULTI frame (BufferPublishMulti): pubTopic is its last run's topic,
	// whose count varint is at buf[pubRunAt] and holds pubRunCount.
	pubRunAt    int
	pubRunCount int

	keep int // the buffer capacity Flush keeps (KeepBuffer); 0: 1 MiB
}

// NewWriter returns a Writer on w. Its buffer starts small and grows with what is written.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w, buf: make([]byte, 0, 1<<10)} }

// Write appends f to the buffer, flushing first when the buffer is large.
func (w *Writer) Write(f Frame) error {
	w.closeOpen()
	w.buf = Append(w.buf, f)
	if len(w.buf) >= 64<<10 {
		return w.Flush()
	}
	return nil
}

// Buffer appends f to the buffer and never writes, for callers that must not block (the
// buffer grows; the caller bounds it and calls Flush).
func (w *Writer) Buffer(f Frame) {
	w.closeOpen()
	w.buf = Append(w.buf, f)
}

// KeepBuffer sets the capacity of buffer Flush keeps for the frames that follow (default
// 1 MiB; a larger one is released): for a stream whose large frames come all the time,
// which would otherwise land on newly allocated memory each time.
func (w *Writer) KeepBuffer(n int) { w.keep = n }

// Release gives back a large buffer when nothing is buffered, and keeps a small one (as
// KeepBuffer(0) then Flush would): for a stream gone quiet, whose buffer sized for its
// busiest rounds would otherwise stay with it for as long as it is idle.
func (w *Writer) Release() {
	w.keep = 0
	if len(w.buf) == 0 && cap(w.buf) > 64<<10 {
		w.buf = make([]byte, 0, 64<<10)
	}
}

// Buffered is the number of encoded bytes not yet flushed.
func (w *Writer) Buffered() int { return len(w.buf) }

// Swap returns the buffered frames without writing them and continues with spare (emptied)
// as the buffer, or a new small one when spare is nil: for a caller that writes a batch on
// another goroutine while it encodes the next. The returned bytes belong to the caller.
func (w *Writer) Swap(spare []byte) []byte {
	w.closeOpen()
	b := w.buf
	if spare == nil {
		spare = make([]byte, 0, 1<<10)
	}
	w.buf = spare[:0]
	return b
}

// Flush writes the buffered frames to the stream.
func (w *Writer) Flush() error {
	w.closeOpen()
	if len(w.buf) == 0 {
		return nil
	}
	_, err := w.w.Write(w.buf)
	if cap(w.buf) > max(w.keep, 1<<20) {
		w.buf = make([]byte, 0, 64<<10) // do not keep a large payload's buffer for the stream's life
	} else {
		w.buf = w.buf[:0]
	}
	return err
}
