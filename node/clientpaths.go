package node

import (
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
)

// clientPaths notices client connections whose remote address changed: a client that
// migrated to a new socket (client.Conn.Migrate) or whose NAT rebound its port without a
// word from it. quic-go accepts both on its own (it validates the new path and switches to
// it, keeping every stream), so the node only counts them: every ClientPathInterval its run
// goroutine compares each connection's RemoteAddr with the last one it saw, and once more when
// the connection ends. Two changes within one interval count once. A cheap poll (an atomic
// load per connection) rather than a connection tracer, which would make quic-go build an
// event for every packet.
type clientPaths struct {
	interval   time.Duration
	log        *slog.Logger
	accepted   prometheus.Counter
	migrations prometheus.Counter

	mu struct {
		sync.Mutex
		conns map[*quic.Conn]string // client connection -> the remote address last seen
	}
}

func newClientPaths(reg prometheus.Registerer, interval time.Duration, log *slog.Logger) *clientPaths {
	p := &clientPaths{
		interval: interval,
		log:      log,
		accepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "quicmq_client_connections_total",
			Help: "Client connections accepted (QUIC handshakes); a client that migrates keeps its connection and adds none."}),
		migrations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "quicmq_client_migrations_total",
			Help: "Client connections seen at a new remote address: a client migration, or a NAT rebinding the client did not notice."}),
	}
	p.mu.conns = make(map[*quic.Conn]string)
	reg.MustRegister(p.accepted, p.migrations)
	return p
}

// add starts watching conn, if it is a client's (peers count their own migrations, as
// quicmq_link_migrations_total on the dialing node). Called where the connection is accepted.
func (p *clientPaths) add(conn *quic.Conn) {
	if conn.ConnectionState().TLS.NegotiatedProtocol != wire.ALPN {
		return
	}
	p.accepted.Inc()
	p.mu.Lock()
	p.mu.conns[conn] = conn.RemoteAddr().String()
	p.mu.Unlock()
}

// remove checks conn a last time and stops watching it. Called when its session ended.
func (p *clientPaths) remove(conn *quic.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if last, ok := p.mu.conns[conn]; ok {
		p.checkLocked(conn, last)
		delete(p.mu.conns, conn)
	}
}

// run checks every connection each interval until stop is closed.
func (p *clientPaths) run(stop <-chan struct{}) {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		p.mu.Lock()
		for conn, last := range p.mu.conns {
			p.checkLocked(conn, last)
		}
		p.mu.Unlock()
	}
}

func (p *clientPaths) checkLocked(conn *quic.Conn, last string) {
	now := conn.RemoteAddr().String()
	if now == last {
		return
	}
	p.mu.conns[conn] = now
	p.migrations.Inc()
	p.log.Debug("client connection moved to a new address", "from", last, "to", now)
}
