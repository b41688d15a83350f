package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
)

// Connection migration: the Conn moves its QUIC connection to a new UDP socket (a new local
// port, and the local address the host's routes now choose) without a new handshake. Every
// stream (subscriptions, the publish stream, listings) carries on, and so do the TLS session,
// the node's session and the Conn's place in the node's logs. quic-go does the work
// (AddPath on a new Transport, Probe, Switch); only the client side can initiate it. Every
// socket the connection used stays open until the connection ends, since quic-go closes the
// connection with its original transport.
//
// A migration that cannot complete (the new path is refused: a firewall that admits new
// flows only with a handshake, a node that ignores the probe) leaves the connection on its
// old path. With Options.Reconnect the Conn then falls back to its reconnect path: it closes
// the connection and dials again on a new socket; subscriptions resume from their position
// and, with Idempotent too, publishes in flight are resent and stored once.

// migration is the Conn's migration state. mu serialises Migrate; the counters are read by
// Stats without it.
type migration struct {
	mu         sync.Mutex
	handshakes atomic.Uint64
	migrations atomic.Uint64
	failed     atomic.Uint64
	fallbacks  atomic.Uint64
}

// Stats are the Conn's connection figures, for logs, metrics and tests.
type Stats struct {
	// Handshakes counts the connections the Conn made: 1 after Dial, one more per reconnect
	// (Options.Reconnect). A migration makes none.
	Handshakes uint64
	// Migrations counts the migrations to a new socket that completed (Conn.Migrate, or one
	// started by Options.MigrateCheck).
	Migrations uint64
	// FailedMigrations counts the migrations whose new path could not be added, probed or
	// switched to.
	FailedMigrations uint64
	// Fallbacks counts the failed migrations, and migrations of an already lost connection,
	// after which the Conn reconnected instead (Options.Reconnect).
	Fallbacks uint64
	// LocalAddr is the local address of the socket the connection sends from now ("0.0.0.0"
	// or "::" and its port: the socket takes the address the host's routes choose).
	LocalAddr string
	// Node is the address of the node of the current connection, as given to Dial.
	Node string
	// Region is the region of the node of the current connection (its WELCOME).
	Region string
	// Failovers counts the connections made to a node of another region than the one
	// before (Options.Failover): a move away from the home region, and one back.
	Failovers uint64
	// SilentNodes counts the connections the Conn ended because no packet came from the
	// node for Options.IdleTimeout (a node that died or was cut off).
	SilentNodes uint64
	// PacketsSent and PacketsReceived count the QUIC packets of the current connection
	// (quic.Conn.ConnectionStats): keep-alives and their answers included.
	PacketsSent, PacketsReceived uint64
	// ResetProbes counts the reset probes sent to nodes silent for 1.5 Options.KeepAlive
	// (watch.go), over every connection.
	ResetProbes uint64
}

// Stats returns the Conn's connection figures.
func (c *Conn) Stats() Stats {
	l := c.current()
	l.mu.Lock()
	local := l.local
	l.mu.Unlock()
	qs := l.qc.ConnectionStats()
	return Stats{
		Handshakes:       c.mig.handshakes.Load(),
		Migrations:       c.mig.migrations.Load(),
		FailedMigrations: c.mig.failed.Load(),
		Fallbacks:        c.mig.fallbacks.Load(),
		LocalAddr:        local,
		Node:             l.addr,
		Region:           l.region,
		Failovers:        c.failover.moves.Load(),
		SilentNodes:      c.watched.silent.Load(),
		PacketsSent:      qs.PacketsSent,
		PacketsReceived:  qs.PacketsReceived,
		ResetProbes:      c.watched.probes.Load(),
	}
}

// Migrate moves the connection to a new UDP socket by QUIC connection migration: it opens the
// socket, adds a path on it, probes the path (for at most Options.MigrateTimeout, within
// ctx) and switches to it. Every stream carries on and no handshake is made; the node sees
// the connection at its new address. Use it when the host's network changed in a way the
// Conn cannot see itself (Options.MigrateCheck watches the local routes), e.g. on a signal.
//
// When the migration fails, the connection stays on its old path and Migrate returns the
// error (the attempt's socket stays open until the connection ends: quic-go ties a
// connection to every socket a path was added on); with Options.Reconnect the Conn instead reconnects (on a new socket, with a new
// handshake) as it does after a lost connection, and Migrate returns nil once it has, or the
// reconnect's error. A Conn whose connection was lost already just reconnects (Reconnect) or
// returns the loss. Stats counts each outcome. Safe for concurrent use; migrations run one
// at a time.
func (c *Conn) Migrate(ctx context.Context) error {
	c.mig.mu.Lock()
	defer c.mig.mu.Unlock()
	select {
	case <-c.closing:
		return ErrClosed
	default:
	}
	l := c.current()
	if err := l.qc.Context().Err(); err != nil {
		err = c.linkErr(l, err)
		if !c.opts.Reconnect {
			return wrap("migrate", err)
		}
		return c.fallback(ctx, l, err)
	}
	err := c.migrateLink(ctx, l)
	if err == nil {
		c.mig.migrations.Add(1)
		return nil
	}
	select {
	case <-c.closing:
		return ErrClosed
	default:
	}
	c.mig.failed.Add(1)
	if !c.opts.Reconnect || ctx.Err() != nil {
		return wrap("migrate", err)
	}
	return c.fallback(ctx, l, err)
}

// migrateLink moves l to a new socket: AddPath, Probe, Switch. On failure l stays on its
// path.
func (c *Conn) migrateLink(ctx context.Context, l *link) error {
	_, udp, err := newSocket(c.addrs[l.at].raddr)
	if err != nil {
		return fmt.Errorf("local socket: %w", err)
	}
	tr := &quic.Transport{Conn: l.probe.Wrap(udp)}
	path, err := l.qc.AddPath(tr)
	if err != nil {
		tr.Close()
		udp.Close()
		return fmt.Errorf("add a path from %s: %w", udp.LocalAddr(), err)
	}
	// From here on the connection is registered with tr, and quic-go would end it with tr:
	// a failed path's socket, too, stays open until the connection ends.
	keep := func(switched bool) bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.closed {
			return false
		}
		l.paths = append(l.paths, tr)
		if switched {
			l.local = udp.LocalAddr().String()
		}
		return true
	}
	fail := func(step string, err error) error {
		path.Close()
		if !keep(false) {
			tr.Close()
			udp.Close()
		}
		return fmt.Errorf("%s of a path from %s: %w", step, udp.LocalAddr(), err)
	}
	pctx, cancel := context.WithTimeout(ctx, c.opts.MigrateTimeout)
	defer cancel()
	// quic-go's probe does not end with the connection: a connection that ended (a node
	// restarted answers the probe with a stateless reset) ends it here.
	defer context.AfterFunc(l.qc.Context(), cancel)()
	if err := path.Probe(pctx); err != nil {
		switch {
		case l.qc.Context().Err() != nil:
			err = c.linkErr(l, context.Cause(l.qc.Context()))
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			err = fmt.Errorf("no answer within %v", c.opts.MigrateTimeout)
		}
		return fail("probe", err)
	}
	if err := path.Switch(); err != nil {
		return fail("switch", err)
	}
	if !keep(true) { // the connection ended meanwhile: nobody else will close this socket
		tr.Close()
		udp.Close()
		return errors.New("the connection ended during the migration")
	}
	return nil
}

// fallback reconnects after a migration of l failed with cause: l is closed (if it still
// works) and a new connection is dialed with the Reconnect policy, within ctx.
func (c *Conn) fallback(ctx context.Context, l *link, cause error) error {
	c.mig.fallbacks.Add(1)
	l.qc.CloseWithError(wire.AppCancelled, "migration failed: reconnecting")
	err := retryReconnect(ctx, func(ctx context.Context) error {
		_, err := c.live(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("client: migrate: %s; reconnecting instead: %w", text(cause), err)
	}
	return nil
}

// watchRoute starts, with Options.MigrateCheck, the goroutine that migrates the connection
// when the local address of the host's route to the node changes (an interface added or
// removed, an address changed). It belongs to the Conn (wg) and ends with Close.
//
// A migration that fails (its probe unanswered within MigrateTimeout: the new network is
// not up yet, or the host is too loaded to answer in time) is tried again after 1, 2 and 4
// MigrateTimeout, then left until the route changes again: a failed attempt's socket stays
// open for the connection's life, so attempts are bounded per change.
func (c *Conn) watchRoute() {
	if c.opts.MigrateCheck <= 0 {
		return
	}
	var (
		on    *link      // the connection last belongs to
		last  string     // the source address of the route to its node when last seen
		retry routeRetry // a failed migration to last, to try again
	)
	// The route the connection was dialed on is taken now, not when the goroutine first
	// runs: a change in between would otherwise be taken for the first route.
	if l := c.current(); l != nil {
		if src, err := c.opts.routeSource(c.addrs[l.at].raddr); err == nil {
			on, last = l, src
		}
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		t := time.NewTicker(c.opts.MigrateCheck)
		defer t.Stop()
		for {
			l := c.current()
			src, err := c.opts.routeSource(c.addrs[l.at].raddr)
			switch {
			case err != nil:
				// No route now (the network is down): wait for one.
			case l != on:
				on, last, retry = l, src, routeRetry{} // a new connection starts from the route it was dialed on
			case src != last:
				last, retry = src, routeRetry{}
				retry.attempt(c, l, c.opts.MigrateTimeout)
			case retry.due(time.Now()):
				retry.attempt(c, l, c.opts.MigrateTimeout)
			}
			if c.current() != l {
				on = nil // fell back to a new connection: take its route next time
			}
			select {
			case <-c.stopCtx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// routeRetries is how many times a migration after a route change is tried again when it
// failed: attempts per change are 1 + routeRetries.
const routeRetries = 3

// routeRetry is the state of the migration after one route change: the attempts made and
// when the next is due (zero: none is).
type routeRetry struct {
	tries int
	next  time.Time
}

// attempt migrates l's connection; when the migration fails and l is still the connection,
// the next attempt is due after 2^(tries-1) backoff, up to routeRetries more.
func (r *routeRetry) attempt(c *Conn, l *link, backoff time.Duration) {
	r.tries++
	r.next = time.Time{}
	if c.Migrate(c.stopCtx) == nil || c.current() != l || r.tries > routeRetries {
		return
	}
	r.next = time.Now().Add(backoff << (r.tries - 1))
}

// due reports whether a retry is due at now.
func (r *routeRetry) due(now time.Time) bool { return !r.next.IsZero() && !now.Before(r.next) }

// routeSource is the local address the host's routes choose to reach raddr: a connected UDP
// socket is given one without sending anything.
func routeSource(raddr *net.UDPAddr) (string, error) {
	network := "udp4"
	if raddr.IP.To4() == nil {
		network = "udp6"
	}
	s, err := net.DialUDP(network, nil, raddr)
	if err != nil {
		return "", err
	}
	defer s.Close()
	return s.LocalAddr().(*net.UDPAddr).IP.String(), nil
}
