// Package liveness notices, on the dialing side of a QUIC connection, that the peer is gone,
// within a bounded time, at the transport level (no frame of QuicMQ's protocols is involved).
//
// quic-go alone notices a dead peer only through its idle timeout, and a restarted one not
// at all while the connection is idle: its keep-alive PING makes a packet of about 25 bytes,
// and an endpoint answers a packet for a connection it does not know with a stateless reset
// only when the packet is larger than the reset it would send (RFC 9000, 10.3; quic-go's
// threshold is 42 bytes). This package adds two things to a connection quic-go drives:
//
//   - Watch closes the connection once no packet at all came from the peer for Timeout
//     (counted from the last packet received, where QUIC's idle timer counts from the first
//     ack-eliciting packet sent after it, up to a keep-alive period later), provided a
//     packet sent meanwhile went unanswered for Timeout less a keep-alive period (so a
//     keep-alive that a busy process sends late does not count against the peer): with
//     keep-alives every Timeout/2, a dead or cut-off peer is noticed in Timeout (and a
//     tick) for half the keep-alive traffic that QUIC's own timer would need for the same
//     bound.
//   - Once the peer has been silent for 1.5 keep-alive periods, Watch sends a reset probe
//     every Tick: a datagram of probeSize bytes that starts like the last short-header
//     packet the connection sent (so it carries the peer's current connection ID) and
//     continues with random bytes. A live peer finds the connection, fails to decrypt the packet and drops
//     it (quic-go counts it against an AEAD limit of 2^52 for AES-GCM); a peer that
//     restarted with the same StatelessResetKey does not know the connection ID and answers
//     with the stateless reset that ends the connection at once. A healthy peer is never
//     silent that long (keep-alives draw its ACKs), so probes cost nothing while it answers.
//
// Silence is the peer's only while this process runs its goroutines on time: pause.go keeps
// the time of the process's last pause, from which a watch counts silence when it is later
// than the last packet, and IdleTimeoutFor gives the QUIC idle timeout to pair with a watch.
//
// The probe needs the bytes of the connection's packets: Probe.Wrap wraps each socket handed
// to a quic.Transport of the connection (a *net.UDPConn keeps its batched and GSO paths).
package liveness

import (
	"context"
	"crypto/rand"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
)

// probeSize is the size of a reset probe: above quic-go's 42-byte threshold for answering
// with a stateless reset (1 + 20-byte connection ID + 4-byte packet number + 1 + 16-byte
// token), and RFC 9000's 43 + a margin for other implementations' choices.
const probeSize = 64

// headLen is how much of a sent packet a probe copies: the first byte and the longest
// connection ID (20 bytes), whatever length the peer chose for its IDs.
const headLen = 1 + 20

// Probe remembers the start of the connection's last short-header packet and sends reset
// probes. One Probe serves every socket of one connection; it is safe for concurrent use.
type Probe struct {
	mu struct {
		sync.Mutex
		head [headLen]byte
		n    int
		addr net.Addr
		send func([]byte, net.Addr) error // the socket that sent it
	}
	sent *atomic.Uint64
}

// NewProbe returns a Probe with nothing seen yet, which counts the probes it sends in sent
// (nil: a counter of its own).
func NewProbe(sent *atomic.Uint64) *Probe {
	if sent == nil {
		sent = new(atomic.Uint64)
	}
	return &Probe{sent: sent}
}

// Wrap returns pc wrapped so that the Probe sees the packets written on it; pass the result
// to quic.Transport.Conn. A *net.UDPConn stays an OOB-capable socket for quic-go.
func (p *Probe) Wrap(pc net.PacketConn) net.PacketConn {
	if u, ok := pc.(*net.UDPConn); ok {
		return &udpSocket{UDPConn: u, p: p}
	}
	return &packetSocket{PacketConn: pc, p: p}
}

// Sent returns how many reset probes were sent.
func (p *Probe) Sent() uint64 { return p.sent.Load() }

// saw records the start of a packet written to addr (a short-header packet: first bit 0;
// with GSO, b holds several packets and starts with the first).
func (p *Probe) saw(b []byte, addr net.Addr, send func([]byte, net.Addr) error) {
	if len(b) < 2 || b[0]&0x80 != 0 || addr == nil {
		return
	}
	p.mu.Lock()
	p.mu.n = copy(p.mu.head[:], b)
	p.mu.addr, p.mu.send = addr, send
	p.mu.Unlock()
}

// Send sends one reset probe, if a short-header packet was seen.
func (p *Probe) Send() {
	var b [probeSize]byte
	p.mu.Lock()
	n, addr, send := copy(b[:], p.mu.head[:p.mu.n]), p.mu.addr, p.mu.send
	p.mu.Unlock()
	if send == nil {
		return
	}
	rand.Read(b[n:])
	if send(b[:], addr) == nil {
		p.sent.Add(1)
	}
}

type udpSocket struct {
	*net.UDPConn
	p *Probe
}

func (s *udpSocket) send(b []byte, addr net.Addr) error {
	_, err := s.UDPConn.WriteTo(b, addr)
	return err
}

// WriteMsgUDP is what quic-go writes with on an OOB-capable socket.
func (s *udpSocket) WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (n, oobn int, err error) {
	s.p.saw(b, addr, s.send)
	return s.UDPConn.WriteMsgUDP(b, oob, addr)
}

func (s *udpSocket) WriteTo(b []byte, addr net.Addr) (int, error) {
	s.p.saw(b, addr, s.send)
	return s.UDPConn.WriteTo(b, addr)
}

type packetSocket struct {
	net.PacketConn
	p *Probe
}

func (s *packetSocket) send(b []byte, addr net.Addr) error {
	_, err := s.PacketConn.WriteTo(b, addr)
	return err
}

func (s *packetSocket) WriteTo(b []byte, addr net.Addr) (int, error) {
	s.p.saw(b, addr, s.send)
	return s.PacketConn.WriteTo(b, addr)
}

// Config sets a Watch's timers.
type Config struct {
	// Timeout closes the connection when no packet came from the peer for this long, or for
	// three probe timeouts of the path if that is longer (the floor quic-go puts under its
	// own idle timeout, so that a slow path is not taken for a dead one). The keep-alive
	// period must be well below it (QuicMQ uses Timeout/2). 0: never (QUIC's idle timeout
	// alone decides).
	Timeout time.Duration
	// KeepAlive is the connection's keep-alive period (quic.Config.KeepAlivePeriod): a
	// healthy peer answers a keep-alive, so one silent for 1.5 KeepAlive draws reset probes,
	// one every Tick. 0 (no keep-alives): probes after 3/4 of Timeout.
	KeepAlive time.Duration
	// Tick is how often the connection's counters are looked at, and the period of the
	// probes. Default the smallest of 250 ms, Timeout/8 and KeepAlive/4.
	Tick time.Duration
	// Code and Reason are what the connection is closed with.
	Code   quic.ApplicationErrorCode
	Reason string
}

// probeAfter is the silence after which reset probes are sent.
func (c Config) probeAfter() time.Duration {
	if c.KeepAlive > 0 {
		return c.KeepAlive * 3 / 2
	}
	return c.Timeout * 3 / 4
}

func (c Config) withDefaults() Config {
	if c.Tick <= 0 {
		c.Tick = 250 * time.Millisecond
		for _, d := range []time.Duration{c.Timeout / 8, c.KeepAlive / 4} {
			if d > 0 {
				c.Tick = min(c.Tick, d)
			}
		}
		c.Tick = max(c.Tick, 10*time.Millisecond)
	}
	return c
}

// maxAckDelay is quic-go's max_ack_delay (25 ms), part of a path's probe timeout.
const maxAckDelay = 25 * time.Millisecond

// Watch watches qc until it ends or ctx is done: it sends reset probes (p may be nil: no
// probes) while the peer is silent, and closes qc when the peer was silent for cfg.Timeout
// and has left a packet sent since unanswered for Timeout less a keep-alive period. It
// returns true when it closed qc.
//
// The second condition is QUIC's own rule (the idle timer restarts at the first
// ack-eliciting packet sent after the last one received) shifted by a keep-alive period: a
// client whose process is busy sends its keep-alive late, and its peer cannot answer what
// it has not been sent yet. A send counts only when seen at least half a keep-alive period
// after the last packet received, which leaves out the acknowledgements of what arrived.
//
// Silence is counted from the end of this process's last pause (pause.go), if that is later
// than the last packet: a process whose goroutines waited to run has not taken in what the
// peer sent meanwhile.
func Watch(ctx context.Context, qc *quic.Conn, p *Probe, cfg Config) (closed bool) {
	cfg = cfg.withDefaults()
	probeAfter := cfg.probeAfter()
	if cfg.Timeout <= 0 && (p == nil || probeAfter <= 0) {
		return false
	}
	defer pauses.acquire()()
	keepAlive := cfg.KeepAlive
	if keepAlive <= 0 || keepAlive >= cfg.Timeout {
		keepAlive = cfg.Timeout / 2
	}
	tick := time.NewTicker(cfg.Tick)
	defer tick.Stop()
	st := qc.ConnectionStats()
	lastRecv, lastSent, since := st.PacketsReceived, st.PacketsSent, time.Now()
	prev := since      // the previous tick
	var sent time.Time // when a packet sent since the last one received was first seen
	for {
		select {
		case <-ctx.Done():
			return false
		case <-qc.Context().Done():
			return false
		case now := <-tick.C:
			if now.Sub(prev) > 2*cfg.Tick {
				// This goroutine ran late, so the process is starved of CPU and quic-go's
				// goroutines may not have taken in what arrived meanwhile: decide nothing
				// on this tick (QUIC's own idle timer is the bound while that lasts).
				prev = now
				runtime.Gosched()
				continue
			}
			st := qc.ConnectionStats()
			if st.PacketsReceived != lastRecv {
				// Received since the previous tick: count the silence from that tick (or
				// from a tick ago, if this one came late), so that a close comes at most
				// Timeout after the last packet rather than a tick late.
				lastRecv, lastSent, since, sent = st.PacketsReceived, st.PacketsSent, prev, time.Time{}
				if early := now.Add(-cfg.Tick); since.Before(early) {
					since = early
				}
				prev = now
				continue
			}
			from := since
			if paused := pauses.lastPause(); paused.After(from) {
				from = paused
			}
			silent := now.Sub(from)
			if st.PacketsSent != lastSent {
				lastSent = st.PacketsSent
				if sent.IsZero() && silent >= keepAlive/2 {
					sent = prev // sent after the previous tick
				}
			}
			prev = now
			if cfg.Timeout > 0 && !sent.IsZero() {
				floor := 3 * (st.SmoothedRTT + max(4*st.MeanDeviation, time.Millisecond) + maxAckDelay)
				if silent >= max(cfg.Timeout, floor) && now.Sub(sent) >= cfg.Timeout-keepAlive {
					qc.CloseWithError(cfg.Code, cfg.Reason)
					return true
				}
			}
			if p != nil && probeAfter > 0 && silent >= probeAfter {
				p.Send()
			}
		}
	}
}
