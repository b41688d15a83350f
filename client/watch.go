package client

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/liveness"
	"github.com/quicmq/quicmq/internal/wire"
)

// Noticing a lost node (Options.IdleTimeout and KeepAlive).
//
// Each connection has a watcher (internal/liveness), a goroutine that readControl starts and
// waits for: it ends the connection when no packet came from the node for IdleTimeout and a
// packet sent since went unanswered for IdleTimeout less a KeepAlive (a keep-alive that this
// process sent late does not count against the node), and once the node has been silent for
// 1.5 KeepAlive it sends reset probes, packets large enough
// that a node restarted on the same address (with its stateless reset key, which a node keeps
// in its data directory) answers them with the stateless reset that ends the connection at
// once. Keep-alives keep a healthy node answering, so its silence never lasts that long; a
// slow subscriber under flow control and a busy connection are answered as well, by the
// node's QUIC stack, whatever its application does.

// watchStats counts what the watchers did.
type watchStats struct {
	silent atomic.Uint64 // connections ended after IdleTimeout without a packet (the watch's or QUIC's timer)
	probes atomic.Uint64 // reset probes sent, over every connection
}

// watch starts l's watcher; the returned function waits for it to exit, which it does when
// l's connection ends.
func (c *Conn) watch(l *link) (wait func()) {
	cfg := liveness.Config{
		Timeout: c.opts.IdleTimeout,
		Code:    wire.AppNoError,
		Reason:  fmt.Sprintf("no packet from the node for %v (idle timeout)", c.opts.IdleTimeout),
	}
	if c.opts.KeepAlive > 0 {
		cfg.KeepAlive = c.opts.KeepAlive
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		closed := liveness.Watch(context.Background(), l.qc, l.probe, cfg)
		var idle *quic.IdleTimeoutError
		if closed || errors.As(context.Cause(l.qc.Context()), &idle) {
			c.watched.silent.Add(1) // QUIC's own idle timer may have been first
		}
	}()
	return func() { <-done }
}
