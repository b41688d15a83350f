package subscriptions

import (
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
)

// Stream is a subscription's stream mapping: how its frames reach the client and how its
// topics are numbered there. It is the only piece the shared-stream ablation
// (node/sharedstream) swaps: reading the log, the read-ahead, building frames, out-of-range
// handling, authorization, ACK checks and durable positions are the subscription core's
// (node/subscribe.go), whichever mapping carries them.
//
// The product mapping, OwnStream, gives each subscription a QUIC stream of its own
// (invariant I4).
type Stream interface {
	// Write writes one batch of whole frames. Only the subscription's writer goroutine calls
	// it (Writer), and end once that goroutine has stopped.
	Write(b []byte) error
	// Index is the index on the wire of the subscription's topic number n (0, 1, 2, ...).
	Index(n uint64) uint64
	// SetWriteDeadline bounds a write blocked on flow control (drain, end).
	SetWriteDeadline(t time.Time)
	// StopReading stops reading the client's side (its ACKs) once the subscription ends.
	StopReading()
	// Finish ends the subscription's part of the stream after its last frame, sending e
	// first if not nil.
	Finish(e *wire.Error)
}

// OwnStream is the product mapping: the subscription's own QUIC stream, topics numbered
// 0, 1, 2, ... as they are bound.
type OwnStream struct{ Str *quic.Stream }

func (o OwnStream) Write(b []byte) error         { _, err := o.Str.Write(b); return err }
func (o OwnStream) Index(n uint64) uint64        { return n }
func (o OwnStream) SetWriteDeadline(t time.Time) { o.Str.SetWriteDeadline(t) }
func (o OwnStream) StopReading()                 { o.Str.CancelRead(wire.AppCancelled) }
func (o OwnStream) Finish(e *wire.Error) {
	if e != nil {
		o.Str.SetWriteDeadline(time.Now().Add(EndWriteTimeout))
		o.Str.Write(wire.Append(nil, &wire.ErrorFrame{Code: e.Code, Message: e.Message}))
	}
	o.Str.Close()
}

// EndWriteTimeout bounds the write of a subscription's last frames (its ERROR) to a client
// that does not read.
const EndWriteTimeout = time.Second

// WriterFunc adapts a mapping's Write to the io.Writer of a wire.Writer.
type WriterFunc func([]byte) error

func (f WriterFunc) Write(b []byte) (int, error) {
	if err := f(b); err != nil {
		return 0, err
	}
	return len(b), nil
}
