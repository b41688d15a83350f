package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/quicmq/quicmq/internal/wire"
)

// Resending (Options.Idempotent with Options.Reconnect): when a publish stream fails because
// the connection was lost, the node shut down, or the node ended it saying the outcome of its
// unanswered publishes is unknown (ERROR 9), those publishes are not failed.
// fail hands them, in order, to the Conn's backlog and starts the resender goroutine, which
// dials again with the Reconnect backoff, opens a publish stream, puts the backlog in its
// queue before any other publish can reach it, and installs it. Until then PublishAsync
// appends to the backlog too, so publishes keep their order across the reconnect. The node
// de-duplicates by (topic, producer, sequence): a resent publish it had stored comes back as
// a duplicate with its original offset.
//
// Locks are taken in this order: pubMu, then a publisher's mu, then rs, then mu.

// errPublishEOF is the end of a publish stream by the node: it answered every publish it
// read (a drain); those it did not answer were not read, and are resent.
var errPublishEOF = errorf(CodeProtocol, "the node closed the publish stream")

// publishResendable is PublishAsync for a Conn that resends.
func (c *Conn) publishResendable(ctx context.Context, m Message) (*Future, error) {
	if err := c.takeSlot(ctx, m.Topic, nil); err != nil {
		return nil, err
	}
	f := c.newFuture(m)
	for {
		if c.joinBacklog(f) {
			return f, nil
		}
		p, err := c.publisher(ctx)
		if err != nil {
			f.abandon()
			return nil, wrap(publishOp(m.Topic), err)
		}
		if p != nil {
			if err = p.queue(f); err == nil {
				return f, nil
			}
			if !c.mayResend(err) {
				f.abandon()
				return nil, wrap(publishOp(m.Topic), err)
			}
		}
		// The stream failed, or a resend began: try again (it queues behind the resend).
		if err := ctx.Err(); err != nil {
			f.abandon()
			return nil, wrap(publishOp(m.Topic), err)
		}
	}
}

// resending reports whether the resender runs.
func (c *Conn) resending() bool {
	c.rs.Lock()
	defer c.rs.Unlock()
	return c.rs.active
}

// joinBacklog appends f to the backlog if the resender runs.
func (c *Conn) joinBacklog(f *Future) bool {
	c.rs.Lock()
	defer c.rs.Unlock()
	if !c.rs.active {
		return false
	}
	c.rs.backlog = append(c.rs.backlog, f)
	return true
}

// mayResend reports whether the futures of a publish stream that failed with err are to be
// resent: the Conn resends, is not closed, and err is the loss of the connection or the node
// shutting down (not a decision of the node about the publishes).
func (c *Conn) mayResend(err error) bool {
	if !c.resend || errors.Is(err, ErrClosed) {
		return false
	}
	select {
	case <-c.closing:
		return false
	default:
	}
	var ue unknownEnd
	if errors.As(err, &ue) {
		return true
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code == CodeShuttingDown || err == errPublishEOF
	}
	return isConnError(err)
}

// unknownEnd is the end of a publish stream by the node's ERROR 9: it could not learn
// whether the publishes it had not answered were appended (the topic's leader it relayed them
// to went away, a proposal did not commit in time), and protocol.md says to publish them again
// with their producer and sequence, which the resender does: the node answers one it stored
// with its original offset. Seen in a rolling upgrade, when the leader is the node stopped.
type unknownEnd struct{ error }

func (u unknownEnd) Unwrap() error { return u.error }

// handOver puts fs, the unanswered futures of the failed stream p, at the head of the
// backlog (publishes that joined it meanwhile are newer) and reports whether the resender
// must be started. Called by fail with p.mu held, so that a publish that finds p failed
// queues behind fs.
func (c *Conn) handOver(p *publisher, fs []*Future) bool {
	c.rs.Lock()
	defer c.rs.Unlock()
	if len(fs) == 0 && !c.rs.active {
		return false
	}
	c.rs.waits = append(c.rs.waits, p.writerDone)
	c.rs.backlog = append(fs, c.rs.backlog...)
	start := !c.rs.active
	c.rs.active = true
	return start
}

func (c *Conn) startResender() {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		c.failBacklog(ErrClosed)
		return
	}
	c.wg.Add(1)
	c.mu.Unlock()
	go c.resendLoop()
}

// resendLoop is the resender goroutine: it tries, with the Reconnect backoff and for at most
// ReconnectTimeout, to hand the backlog to a new publish stream.
func (c *Conn) resendLoop() {
	defer c.wg.Done()
	ctx, cancel := context.WithTimeout(c.stopCtx, c.opts.ReconnectTimeout)
	defer cancel()
	err := retryReconnect(ctx, c.resendOnce)
	if err == nil {
		return
	}
	if c.stopCtx.Err() != nil {
		err = ErrClosed
	} else if ctx.Err() != nil {
		err = fmt.Errorf("no new connection within %v (%w)", c.opts.ReconnectTimeout, err)
	}
	c.failBacklog(err)
}

// resendOnce opens a publish stream and installs it with the backlog queued first.
func (c *Conn) resendOnce(ctx context.Context) error {
	// The writers of failed streams must be done with the frames before they are encoded
	// again; each exits soon after its stream failed.
	for {
		c.rs.Lock()
		waits := c.rs.waits
		c.rs.waits = nil
		c.rs.Unlock()
		if len(waits) == 0 {
			break
		}
		for _, w := range waits {
			select {
			case <-w:
			case <-ctx.Done():
				c.rs.Lock()
				c.rs.waits = append(c.rs.waits, waits...)
				c.rs.Unlock()
				return ctx.Err()
			}
		}
	}
	s, l, err := c.openStreamOn(ctx)
	if err != nil {
		return err
	}
	p := c.newPublisher(s, l)
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	c.rs.Lock()
	if len(c.rs.waits) > 0 { // another stream failed meanwhile: wait for its writer first
		c.rs.Unlock()
		s.CancelWrite(wire.AppCancelled)
		s.CancelRead(wire.AppCancelled)
		return errorf(CodeUnavailable, "publish stream failed during the resend")
	}
	fs := c.rs.backlog
	p.mu.queued = fs // p runs no goroutine yet: it is not shared
	c.rs.backlog = nil
	if err := c.install(p); err != nil {
		c.rs.backlog = fs
		c.rs.Unlock()
		return err
	}
	c.rs.active = false
	c.rs.Unlock()
	if len(fs) > 0 {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

// failBacklog fails every future of the backlog with err: their outcome is unknown.
func (c *Conn) failBacklog(err error) {
	c.rs.Lock()
	fs := c.rs.backlog
	c.rs.backlog, c.rs.active = nil, false
	c.rs.Unlock()
	for _, f := range fs {
		f.complete(Ack{}, &OutcomeUnknownError{Topic: f.topic, ProducerID: f.producer, Sequence: f.sequence, Err: err})
	}
}
