package groups

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
)

// Relay is one member relayed to its group's home, a node of the region that serves the
// group (node/grouprelay.go chooses it and opens the stream there): it passes frames on as
// they are, the client's ACK, NAK and COMMIT up, the home's SUBSCRIBED, TOPIC, RECORD,
// COMMITTED and ERROR down (TOPIC names mapped to the client's view), one frame at a time,
// so the client's flow control reaches the home's member stream (I5). It holds no group
// state: the home's member goroutines write that.
//
// Goroutines: Serve's caller copies the home's frames down; a goroutine Serve starts and
// waits for copies the client's up. err and gone, under mu, are written by that goroutine
// and by Drain (any goroutine), read by Serve once both copies ended.
type Relay struct {
	cancel context.CancelFunc
	mu     sync.Mutex
	err    *wire.Error // set by Drain or a bad client frame: sent to the client instead of the home's end
	gone   bool        // the client reset its stream: nothing more to tell it
}

// NewRelay makes a relay whose Drain ends it with cancel (that of the context Serve's
// streams are bound to).
func NewRelay(cancel context.CancelFunc) *Relay { return &Relay{cancel: cancel} }

// Drain ends the relay as the node shuts down. Any goroutine.
func (rl *Relay) Drain() {
	rl.mu.Lock()
	if rl.err == nil {
		rl.err = wire.Errorf(wire.CodeShuttingDown, "node shutting down")
	}
	rl.mu.Unlock()
	rl.cancel()
}

// Serve relays the client's member stream str (its frames read from r) to the home's stream
// up, until either ends. clientName maps a TOPIC's name to the client's view; readAhead is
// how many bytes it buffers down before it writes them. It returns the error to send the
// client (a drain, or a frame a member may not send), whether the home ended the stream
// (its FIN or ERROR reached the client's stream whole), and whether the client is gone.
func (rl *Relay) Serve(str, up *quic.Stream, r *wire.Reader, clientName func(string) string, readAhead int) (e *wire.Error, ended, gone bool) {
	upDone := make(chan struct{})
	go func() { // client -> home: ACK, NAK, COMMIT, then the client's FIN
		defer close(upDone)
		rl.toHome(r, up)
	}()
	ended = rl.fromHome(str, up, clientName, readAhead)
	rl.cancel()
	<-upDone
	rl.mu.Lock()
	defer rl.mu.Unlock()
	return rl.err, ended, rl.gone
}

// toHome copies the member's ACK, NAK and COMMIT frames to the home, then the client's FIN.
// A client gone or a frame a member may not send ends the relay (cancel), said in rl.
func (rl *Relay) toHome(r *wire.Reader, up *quic.Stream) {
	for {
		f, err := r.Read()
		if errors.Is(err, io.EOF) {
			up.Close()
			return
		}
		if err != nil {
			rl.mu.Lock()
			rl.gone = true
			rl.mu.Unlock()
			rl.cancel()
			return
		}
		switch f.(type) {
		case *wire.Ack, *wire.Nak, *wire.Commit:
		default:
			rl.mu.Lock()
			rl.err = wire.Errorf(wire.CodeProtocol, "unexpected %s on a group member's stream: only ACK, NAK and COMMIT may follow SUBSCRIBE", f.Type())
			rl.mu.Unlock()
			rl.cancel()
			return
		}
		if _, err := up.Write(wire.Append(nil, f)); err != nil {
			rl.cancel()
			return
		}
	}
}

// fromHome copies the home's frames to the client, one frame at a time (a TOPIC's name in
// the client's namespace), flushing when the home has nothing more buffered or a
// read-ahead's worth waits. ended reports that the home ended the stream (FIN after its
// last frame, or an ERROR) and that all of it reached the client's stream.
func (rl *Relay) fromHome(str, up *quic.Stream, clientName func(string) string, readAhead int) (ended bool) {
	w := wire.NewWriter(str)
	hr := wire.NewReader(up, wire.Limits{})
	for {
		f, err := hr.Read()
		if errors.Is(err, io.EOF) {
			ended = true
			break
		}
		if err != nil {
			break
		}
		if t, ok := f.(*wire.Topic); ok {
			t.Name = strings.Clone(clientName(t.Name))
		}
		w.Buffer(f)
		if !hr.FrameBuffered() || w.Buffered() >= readAhead {
			if w.Flush() != nil {
				rl.cancel()
				break
			}
		}
	}
	if w.Flush() != nil {
		ended = false
	}
	return ended
}
