package client

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/quicmq/quicmq/internal/wire"
)

// Cross-region failover (Options.Failover).
//
// A Conn's home region is the list of nodes Dial was given. When a reconnect (Options.Reconnect)
// finds every node of that list unreachable, it dials the nodes of Options.Failover in order,
// which may be in other regions: the first that answers WELCOME becomes the connection, in
// whatever region it is. Offsets, durable positions and de-duplication are per region, so what
// moves with the Conn is what means the same everywhere:
//   - A subscription made again on a node of another region resumes with its vector position
//     (Subscription.Position: per topic, per origin region, the last origin offset it
//     delivered): the node skips every record the vector covers and delivers the rest, each
//     origin in order. Records of the lost region that it acknowledged but had not mirrored
//     yet are not skipped: they reach the new region when the lost one returns and its mirror
//     catches up, and the subscription delivers them then.
//   - A group member made again there joins the group in that region, which resumes from its
//     state mirrored from the lost region; the member drops a redelivery of a record it
//     acknowledged before the move (groupmove.go).
//   - A publish there is that region's record (its origin is the new region). A publish resent
//     after the move (Idempotent) is de-duplicated only against what the new region stored:
//     one the lost region had stored before it went down is stored again, as a record of the
//     new region, so across a failover an idempotent publish is stored at least once, not once.
// Each later reconnect tries the home region's nodes first, then the failover list again; and
// while on a failover node the Conn tries its home nodes every Options.FailbackCheck, moving
// back as soon as one answers (below).

// failover is the Conn's failover state.
type failover struct {
	moves atomic.Uint64 // connections made to a node of another region than the one before
}

// dialAny makes a new connection: to a home node, trying them in order from index first (an
// index past the home list starts at the first), else, when Options.Failover names nodes, to
// the first of those that answers. Each try's error is kept.
func (c *Conn) dialAny(ctx context.Context, first int) (*link, *wire.Reader, error) {
	if first >= c.home {
		first = 0
	}
	l, r, err := c.dialLink(ctx, first)
	if err == nil || c.home == len(c.addrs) || ctx.Err() != nil || refused(err, func(c Code) bool { return c == CodeUnauthorized }) {
		return l, r, err
	}
	errs := []error{err}
	for at := c.home; at < len(c.addrs); at++ {
		l, r, err := c.dialNode(ctx, at)
		if err == nil {
			return l, r, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, nil, nodesError(errs)
}

// Going home (Options.FailbackCheck). While the connection is to a failover node, every
// FailbackCheck the Conn dials its home nodes (a node that is still down answers a dial
// within a round trip, "connection refused", and costs nothing; one cut off costs the dial's
// bound, failbackDialTimeout). When one answers WELCOME, the Conn waits (at most
// failbackFlushTimeout) for the publishes in flight to be answered, makes the home
// connection its own and closes the failover one; subscriptions are made again at home by
// their next Next, with their vector positions, exactly as after a lost connection.
const (
	failbackDialTimeout  = 2 * time.Second
	failbackFlushTimeout = time.Second
)

// failback runs while l, a connection to a failover node, is the Conn's connection;
// readControl starts it and waits for it. It returns when l ends or the Conn moved home.
func (c *Conn) failback(l *link) {
	t := time.NewTicker(c.opts.FailbackCheck)
	defer t.Stop()
	for {
		select {
		case <-l.qc.Context().Done():
			return
		case <-c.closing:
			return
		case <-t.C:
		}
		if c.goHome(l) {
			return
		}
	}
}

// goHome dials the home nodes once and, when one answers, moves the Conn there from l. It
// reports whether l is no longer the Conn's connection.
func (c *Conn) goHome(l *link) bool {
	ctx, cancel := context.WithTimeout(context.Background(), failbackDialTimeout)
	defer cancel()
	stop := context.AfterFunc(l.qc.Context(), cancel)
	defer stop()
	nl, r, err := c.dialLink(ctx, 0)
	if err != nil {
		return false
	}
	fctx, fcancel := context.WithTimeout(ctx, failbackFlushTimeout)
	err = c.Flush(fctx) // publishes in flight on l would end without an answer
	fcancel()
	c.redialMu.Lock()
	defer c.redialMu.Unlock()
	c.mu.Lock()
	if err != nil || c.mu.closed || c.mu.cur != l || l.qc.Context().Err() != nil {
		gone := c.mu.closed || c.mu.cur != l || l.qc.Context().Err() != nil
		c.mu.Unlock()
		nl.close(wire.AppNoError, "not needed")
		return gone
	}
	c.mu.cur = nl
	old := c.mu.pub
	c.wg.Add(1)
	c.mu.Unlock()
	if old != nil {
		old.retired.Store(true) // publishes from now on open a stream at home
	}
	c.failover.moves.Add(1)
	go c.readControl(nl, r)
	// A publish that took l's stream after the flush above and before it was retired is
	// answered there before l closes: without this it would end with its outcome unknown.
	fctx, fcancel = context.WithTimeout(context.Background(), failbackFlushTimeout)
	c.Flush(fctx)
	fcancel()
	l.close(wire.AppNoError, "client back in its home region")
	return true
}
