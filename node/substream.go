package node

import (
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
)

// subStream is a subscription's stream mapping: how its frames reach the client and how its
// topics are numbered there. It is the only piece the shared-stream ablation (ablation.go)
// swaps: reading the log, the read-ahead, building frames, out-of-range handling,
// authorization, ACK checks and durable positions are the subscription core's
// (subscribe.go), whichever mapping carries them.
//
// The product mapping, ownStream, gives each subscription a QUIC stream of its own
// (invariant I4).
type subStream interface {
	// write writes one batch of whole frames. Only the subscription's writer goroutine calls
	// it, and end once that goroutine has stopped.
	write(b []byte) error
	// index is the index on the wire of the subscription's topic number n (0, 1, 2, ...).
	index(n uint64) uint64
	// setWriteDeadline bounds a write blocked on flow control (drain, end).
	setWriteDeadline(t time.Time)
	// stopReading stops reading the client's side (its ACKs) once the subscription ends.
	stopReading()
	// finish ends the subscription's part of the stream after its last frame, sending e
	// first if not nil.
	finish(e *wire.Error)
}

// ownStream is the product mapping: the subscription's own QUIC stream, topics numbered
// 0, 1, 2, ... as they are bound.
type ownStream struct{ str *quic.Stream }

func (o ownStream) write(b []byte) error         { _, err := o.str.Write(b); return err }
func (o ownStream) index(n uint64) uint64        { return n }
func (o ownStream) setWriteDeadline(t time.Time) { o.str.SetWriteDeadline(t) }
func (o ownStream) stopReading()                 { o.str.CancelRead(wire.AppCancelled) }
func (o ownStream) finish(e *wire.Error) {
	if e != nil {
		o.str.SetWriteDeadline(time.Now().Add(endWriteTimeout))
		o.str.Write(wire.Append(nil, &wire.ErrorFrame{Code: e.Code, Message: e.Message}))
	}
	o.str.Close()
}

// endWriteTimeout bounds the write of a subscription's last frames (its ERROR) to a client
// that does not read.
const endWriteTimeout = time.Second

// writerFunc adapts a mapping's write to the io.Writer of a wire.Writer.
type writerFunc func([]byte) error

func (f writerFunc) Write(b []byte) (int, error) {
	if err := f(b); err != nil {
		return 0, err
	}
	return len(b), nil
}
