package node

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"
)

// Holder streams (docs/protocol.md "Holder streams"): the exclusive lock of a durable whose
// home (grouprelay.go) is another node of the region is taken there. The node the client is
// connected to opens a stream to the home and sends HOLD; the home takes the lock for it
// (a standby's HOLD waits) and answers HELD, or ERROR 15 naming the holder, and keeps it
// until the stream ends: the asker's FIN when the subscription ends, or the stream's or
// link's loss. A lost stream releases the lock at the home, so the asker ends its
// subscription too, with ERROR 9 (subscribe again): one that went on would hold the durable
// without its lock. Between the loss and that end a second subscriber can take the lock, as
// in the brief window of a membership change (grouprelay.go).

// lockAt takes durable name's lock at node home for the client of s: as lockDurable.
func (n *Node) lockAt(s *session, home, name, shown string, standby bool, stop <-chan struct{}) (release func(), e *wire.Error) {
	ctx, cancel := context.WithCancel(s.ctx)
	str, err := n.fed.OpenStreamTo(ctx, home)
	if err != nil {
		cancel()
		return nil, wire.Errorf(wire.CodeUnavailable, "durable consumer %q: its lock is kept by node %s of this region, which cannot be reached now: %v", shown, home, err)
	}
	req := &wire.Hold{Name: name, Shown: shown, Client: s.conn.RemoteAddr().String()}
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
					n.lockLost(s, name, shown, home)
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
		t := time.NewTimer(n.cfg.ManageTimeout)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-timeout:
		end()
		return nil, wire.Errorf(wire.CodeUnavailable, "durable consumer %q: node %s, which keeps its lock, did not answer within %v", shown, home, n.cfg.ManageTimeout)
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
	case <-s.ctx.Done():
		end()
		return nil, nil
	case <-n.stop:
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

// lockLost ends the subscriptions of session s under durable name (stored): the stream that
// held its lock at home ended without them letting go.
func (n *Node) lockLost(s *session, name, shown, home string) {
	select {
	case <-n.stop:
		return // this node is shutting down: its subscriptions end with ERROR 11
	default:
	}
	e := wire.Errorf(wire.CodeUnavailable, "durable consumer %q: its lock at node %s of this region was lost (the node or the link to it went away): subscribe again", shown, home)
	for _, sub := range n.liveSubscriptions() {
		if sub.s == s && sub.req.Durable == name {
			sub.ackErr.CompareAndSwap(nil, e)
			sub.cancel()
		}
	}
}

// serveHold serves a HOLD from a node of this region: it takes the lock here and keeps it
// until the stream ends.
func (s *session) serveHold(str *quic.Stream, r *wire.Reader, f *wire.Hold) {
	n := s.n
	if !s.peer || s.peerRegion() != n.cfg.Region {
		s.failStream(str, wire.Errorf(wire.CodeForbidden, "HOLD is for the nodes of this region"))
		return
	}
	if !auth.ValidConsumerName(f.Name, true) {
		s.failStream(str, wire.Errorf(wire.CodeInvalidArgument, "durable name %q: want 1-400 characters of [A-Za-z0-9_./-]", f.Name))
		return
	}
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
	release, e := n.lockHere(s.peerName, f.Client, f.Name, f.Shown, f.Flags&wire.HoldStandby != 0, gone, s.ctx.Done())
	if e != nil {
		s.failStream(str, e)
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
	case <-s.ctx.Done():
	}
	str.Close()
}
