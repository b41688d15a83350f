package subscriptions

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
)

// Holder streams (docs/protocol.md "Holder streams"): the exclusive lock of a durable whose
// home (node/grouprelay.go) is another node of the region is taken there. The node the client is
// connected to opens a stream to the home and sends HOLD; the home takes the lock for it
// (a standby's HOLD waits) and answers HELD, or ERROR 15 naming the holder, and keeps it
// until the stream ends: the asker's FIN when the subscription ends, or the stream's or
// link's loss. A lost stream releases the lock at the home, so the asker ends its
// subscription too, with ERROR 9 (subscribe again): one that went on would hold the durable
// without its lock. Between the loss and that end a second subscriber can take the lock, as
// in the brief window of a membership change (node/grouprelay.go).

// At takes durable name's lock at node home, another node of the region, for a client
// (address client) of this node whose session's context is ctx: as Here, with the session
// gone when ctx is done. lost runs, on the holder stream's reader, when the stream ends
// without release: the caller ends the subscriptions that held the lock.
func (l *Locks) At(ctx context.Context, home, client, name, shown string, standby bool, stop <-chan struct{}, lost func()) (release func(), e *wire.Error) {
	sessionDone := ctx.Done()
	ctx, cancel := context.WithCancel(ctx)
	str, err := l.cfg.Open(ctx, home)
	if err != nil {
		cancel()
		return nil, wire.Errorf(wire.CodeUnavailable, "durable consumer %q: its lock is kept by node %s of this region, which cannot be reached now: %v", shown, home, err)
	}
	req := &wire.Hold{Name: name, Shown: shown, Client: client}
	if standby {
		req.Flags = wire.HoldStandby
	}
	answer := make(chan error, 1) // nil: HELD
	readerDone := make(chan struct{})
	var released atomic.Bool // by release: the stream's end is ours
	// The stream's reader: the answer, then nothing until the stream ends.
	go func() {
		defer close(readerDone)
		r := wire.NewReader(str, wire.Limits{})
		f, err := r.Read()
		switch f := f.(type) {
		case *wire.Held:
			answer <- nil
		case *wire.ErrorFrame:
			answer <- f.AsError()
			return
		default:
			if err == nil {
				err = wire.Errorf(wire.CodeProtocol, "unexpected %s on a holder stream", f.Type())
			}
			answer <- err
			return
		}
		for {
			if _, err := r.Read(); err != nil {
				if !released.Load() {
					l.lost(lost)
				}
				return
			}
		}
	}()
	end := func() {
		str.CancelRead(wire.AppCancelled)
		str.CancelWrite(wire.AppCancelled)
		<-readerDone
		cancel()
	}
	if _, err := str.Write(wire.Append(nil, req)); err != nil {
		end()
		return nil, wire.Errorf(wire.CodeUnavailable, "durable consumer %q: ask node %s for its lock: %v", shown, home, err)
	}
	var timeout <-chan time.Time // a standby waits for the holder; anyone else for an answer
	if !standby {
		t := time.NewTimer(l.cfg.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-timeout:
		end()
		return nil, wire.Errorf(wire.CodeUnavailable, "durable consumer %q: node %s, which keeps its lock, did not answer within %v", shown, home, l.cfg.Timeout)
	case err := <-answer:
		var we *wire.Error
		switch {
		case err == nil:
		case errors.As(err, &we):
			end()
			return nil, we
		default:
			end()
			return nil, wire.Errorf(wire.CodeUnavailable, "durable consumer %q: ask node %s for its lock: %v", shown, home, err)
		}
	case <-stop:
		end()
		return nil, nil
	case <-sessionDone:
		end()
		return nil, nil
	case <-l.cfg.Stop:
		end()
		return nil, wire.Errorf(wire.CodeShuttingDown, "node shutting down")
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			released.Store(true)
			str.Close() // the FIN releases the lock at the home
			end()
		})
	}, nil
}

// lost runs lost, the end of the subscriptions whose lock's holder stream ended without
// them letting go, unless this node is shutting down: its subscriptions end with ERROR 11.
func (l *Locks) lost(lost func()) {
	select {
	case <-l.cfg.Stop:
		return
	default:
	}
	lost()
}

// ServeHold serves a HOLD, f, read by r from str, a stream of node peer of this region
// (the caller checked that and f's name) whose session's context is ctx: it takes the lock
// here and keeps it until the stream ends. fail answers the stream with an error.
func (l *Locks) ServeHold(ctx context.Context, str *quic.Stream, r *wire.Reader, f *wire.Hold, peer string, fail func(*quic.Stream, *wire.Error)) {
	gone := make(chan struct{}) // the asker's FIN or reset
	go func() {
		defer close(gone)
		for {
			if _, err := r.Read(); err != nil {
				return
			}
		}
	}()
	defer func() {
		str.CancelRead(wire.AppCancelled)
		<-gone
	}()
	release, e := l.Here(peer, f.Client, f.Name, f.Shown, f.Flags&wire.HoldStandby != 0, gone, ctx.Done())
	if e != nil {
		fail(str, e)
		return
	}
	if release == nil {
		str.CancelWrite(wire.AppCancelled)
		return
	}
	defer release()
	w := wire.NewWriter(str)
	w.Buffer(&wire.Held{})
	if w.Flush() != nil {
		return
	}
	select {
	case <-gone:
	case <-ctx.Done():
	}
	str.Close()
}
