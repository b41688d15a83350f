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
// One goroutine at a time calls next (the Subscription's readMu); the deadline callback runs
// on a context goroutine and is fenced by mu and gen.
type frameReader struct {
	s     *quic.Stream
	dec   *wire.Decoder
	buf   []byte
	r, w  int // unread bytes are buf[r:w]
	chunk int // read size: small until the stream shows it carries more (most subscriptions start idle)

	mu  sync.Mutex
	gen uint64 // incremented after each read; a late callback of an older read does nothing
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
	if ctx.Done() == nil {
		n, err := fr.s.Read(fr.buf[fr.w:])
		fr.w += n
		if n > 0 {
			return nil
		}
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	fr.mu.Lock()
	gen := fr.gen
	fr.mu.Unlock()
	interrupted := false
	stop := context.AfterFunc(ctx, func() {
		fr.mu.Lock()
		defer fr.mu.Unlock()
		if fr.gen == gen {
			interrupted = true
			fr.s.SetReadDeadline(time.Unix(1, 0))
		}
	})
	n, err := fr.s.Read(fr.buf[fr.w:])
	stop()
	fr.mu.Lock()
	fr.gen++
	if interrupted {
		fr.s.SetReadDeadline(time.Time{})
	}
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
