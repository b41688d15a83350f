package client

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
)

// frameReader reads frames from a subscription stream on the caller's goroutine, with a
// context per call. Unlike wire.Reader it can be interrupted between any two bytes without
// losing its place: bytes read so far stay in buf, and the next call decodes from there. A
// cancelled context interrupts a blocked read by setting a past read deadline on the stream.
// RECORD frames are decoded in place (wire.Decoder): the *wire.Record next returns, and the
// bytes it points into, are valid only until the following call.
//
// The context of the last blocking read stays watched (context.AfterFunc) until a read with
// another context replaces it, or release: a subscription read with one context for its life
// registers once, not once per read (a registration per read was 4.5-6% of all CPU in
// BenchmarkFanout at 1,000 subscriptions, both ends in one process). The owner calls release
// when it drops the reader.
//
// One goroutine at a time calls next and release (the Subscription's readMu); the watch's
// callback runs on a context goroutine and is fenced by mu.
type frameReader struct {
	s     *quic.Stream
	dec   *wire.Decoder
	buf   []byte
	r, w  int // unread bytes are buf[r:w]
	chunk int // read size: small until the stream shows it carries more (most subscriptions start idle)

	stop    func() bool // stops the watch of the context whose Done is watched
	watches int         // contexts watched so far (tests)

	mu          sync.Mutex
	watched     <-chan struct{} // Done of the watched context; a callback of another does nothing
	reading     bool            // a Read of fill is in progress
	interrupted bool            // the watch set a past read deadline on that Read
}

const (
	readChunk      = 32 << 10
	firstReadChunk = 2 << 10
)

func newFrameReader(s *quic.Stream, lim wire.Limits) *frameReader {
	return &frameReader{s: s, dec: wire.NewDecoder(lim), chunk: firstReadChunk}
}

// next returns the next frame; a *wire.Record and the bytes it points into are valid only
// until the next call. A frame already buffered is returned even when ctx is done; ctx ends
// only a wait for more bytes, and then next returns ctx's error with the partial frame kept
// for the next call.
func (fr *frameReader) next(ctx context.Context) (wire.Frame, error) {
	if fr.r == fr.w {
		fr.r, fr.w = 0, 0
		if cap(fr.buf) > 4*readChunk {
			fr.buf = nil // a large frame passed; do not keep its buffer
		}
	}
	for {
		need := 5
		if fr.w-fr.r >= 5 {
			f, n, err := fr.dec.Decode(fr.buf[fr.r:fr.w])
			if err == nil {
				// The frame may alias buf[r:r+n]: the bytes stay in place until the next call,
				// which is the first to move or drop them.
				fr.r += n
				return f, nil
			}
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, err
			}
			need = 5 + int(binary.BigEndian.Uint32(fr.buf[fr.r+1:fr.r+5])) // checked against MaxFrame by Decode
		}
		fr.reserve(need)
		if err := fr.fill(ctx); err != nil {
			if errors.Is(err, io.EOF) && fr.w > fr.r {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}

// reserve makes room for a frame of need bytes starting at r, and for at least one chunk of
// reading beyond what is buffered.
func (fr *frameReader) reserve(need int) {
	size := max(need, fr.w-fr.r+fr.chunk)
	if len(fr.buf)-fr.r >= size {
		return
	}
	if len(fr.buf) >= size {
		copy(fr.buf, fr.buf[fr.r:fr.w])
	} else {
		nb := make([]byte, size)
		copy(nb, fr.buf[fr.r:fr.w])
		fr.buf = nb
	}
	fr.w -= fr.r
	fr.r = 0
}

// fill reads once from the stream into buf[w:].
func (fr *frameReader) fill(ctx context.Context) error {
	if fr.w == len(fr.buf) {
		fr.chunk = readChunk // the last read filled the buffer: the stream is busy
	}
	done := ctx.Done()
	if done == nil {
		fr.release() // a watch left from an earlier context must not interrupt this read
		n, err := fr.s.Read(fr.buf[fr.w:])
		fr.w += n
		if n > 0 {
			return nil
		}
		return err
	}
	fr.watch(ctx, done)
	fr.mu.Lock()
	fr.reading = true
	fr.mu.Unlock()
	select {
	case <-done:
		// Done before reading was set: the callback may have found nothing to interrupt.
		fr.mu.Lock()
		fr.reading = false
		fr.endInterrupt()
		fr.mu.Unlock()
		return ctx.Err()
	default:
	}
	n, err := fr.s.Read(fr.buf[fr.w:])
	fr.mu.Lock()
	fr.reading = false
	interrupted := fr.endInterrupt()
	fr.mu.Unlock()
	fr.w += n
	if n > 0 {
		return nil
	}
	if interrupted && errors.Is(err, os.ErrDeadlineExceeded) {
		return ctx.Err()
	}
	return err
}

// watch makes ctx (whose Done is done) the watched context, unless it is already.
func (fr *frameReader) watch(ctx context.Context, done <-chan struct{}) {
	if fr.watched == done { // only this goroutine writes watched
		return
	}
	fr.release()
	fr.mu.Lock()
	fr.watched = done
	fr.mu.Unlock()
	fr.watches++
	fr.stop = context.AfterFunc(ctx, func() {
		fr.mu.Lock()
		defer fr.mu.Unlock()
		if fr.watched == done && fr.reading && !fr.interrupted {
			fr.interrupted = true
			fr.s.SetReadDeadline(time.Unix(1, 0))
		}
	})
}

// endInterrupt clears an interruption of the read that ended, reporting whether there was
// one. mu held.
func (fr *frameReader) endInterrupt() bool {
	if !fr.interrupted {
		return false
	}
	fr.interrupted = false
	fr.s.SetReadDeadline(time.Time{})
	return true
}

// release stops watching a context. A callback already running finds watched changed and
// does nothing.
func (fr *frameReader) release() {
	if fr.stop == nil {
		return
	}
	fr.stop()
	fr.stop = nil
	fr.mu.Lock()
	fr.watched = nil
	fr.mu.Unlock()
}
