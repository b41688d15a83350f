package lossy

import (
	"fmt"
	"net"
	"sync"
	"time"
)

// TCPRelayPortLow and TCPRelayPortHigh bound the TCP ports a TCPRelay binds: its listener and
// the local ends of its upstream connections, so that a loss rule matching TCPRelayHops
// ("tcp dport 29200-29299") drops packets on the relay's
// hops only, once per direction.
const (
	TCPRelayPortLow  = 29200
	TCPRelayPortHigh = 29299
)

// TCPRelayHops is a SetLossMatch expression for the packets a TCPRelay receives, from its
// clients and from upstream: loss on the relayed path only.
var TCPRelayHops = fmt.Sprintf("tcp dport %d-%d", TCPRelayPortLow, TCPRelayPortHigh)

// UDPRelayHops is the same for a Relay: the UDP packets it receives, in both directions.
var UDPRelayHops = fmt.Sprintf("udp dport %d-%d", RelayPortLow, RelayPortHigh)

// TCPRelay is Relay for TCP clients (NATS): each accepted connection gets its own upstream
// connection, and the bytes read on either side are written to the other delay later, in
// order. It delays the bytes, not the segments: TCP's own round trip on each hop stays
// loopback's, so a lost segment costs what it costs on loopback (an RTO of at least 200 ms,
// or a fast retransmit), not one delayed round trip.
type TCPRelay struct {
	ln       net.Listener
	upstream string
	delay    time.Duration
	wg       sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
}

// NewTCPRelay listens on 127.0.0.1 (a port of the relay range) and relays every connection to
// upstream, delay later each way.
func NewTCPRelay(upstream string, delay time.Duration) (*TCPRelay, error) {
	ln, err := bindInRange("tcp relay", "TCP", TCPRelayPortLow, TCPRelayPortHigh, func(port int) (net.Listener, error) {
		return net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	})
	if err != nil {
		return nil, err
	}
	r := &TCPRelay{ln: ln, upstream: upstream, delay: delay}
	r.wg.Go(r.accept)
	return r, nil
}

// Addr is the address clients dial instead of upstream.
func (r *TCPRelay) Addr() string { return r.ln.Addr().String() }

// Close stops the relay, closes its connections and waits for its goroutines.
func (r *TCPRelay) Close() error {
	err := r.ln.Close()
	r.mu.Lock()
	for _, c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
	return err
}

func (r *TCPRelay) track(c net.Conn) {
	r.mu.Lock()
	r.conns = append(r.conns, c)
	r.mu.Unlock()
}

func (r *TCPRelay) accept() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		up, err := r.dialUpstream()
		if err != nil {
			c.Close()
			continue
		}
		r.track(c)
		r.track(up)
		r.wg.Go(func() { r.pipe(c, up) })
		r.wg.Go(func() { r.pipe(up, c) })
	}
}

// dialUpstream connects from a local port of the relay range, so that packets upstream sends
// to the relay match TCPRelayHops.
func (r *TCPRelay) dialUpstream() (net.Conn, error) {
	return bindInRange("tcp relay: dial "+r.upstream, "TCP", TCPRelayPortLow, TCPRelayPortHigh, func(port int) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}, Timeout: 5 * time.Second}
		return d.Dial("tcp", r.upstream)
	})
}

// pipe copies from src to dst, each chunk delay after it was read. When either side ends,
// both are closed.
func (r *TCPRelay) pipe(src, dst net.Conn) {
	q := make(chan delayed, 4096) // a full queue stops reading: TCP's backpressure, no drop
	done := make(chan struct{})
	go func() {
		defer close(done)
		for d := range q {
			if wait := time.Until(d.at); wait > 0 {
				time.Sleep(wait)
			}
			if _, err := dst.Write(d.buf); err != nil {
				src.Close()   // ends the reader below
				for range q { // drain so the reader never blocks on a dead writer
				}
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			q <- delayed{at: time.Now().Add(r.delay), buf: append([]byte(nil), buf[:n]...)}
		}
		if err != nil { // EOF, a reset or Close: the relayed connection ends
			break
		}
	}
	close(q)
	<-done
	src.Close()
	dst.Close()
}
