package lossy

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"
)

// RelayPortLow and RelayPortHigh bound the UDP ports a Relay binds, so that a loss rule can
// spare what it sends (ExceptRelays): a datagram that crosses a relay inside the lossy
// namespace then meets the loss once per direction, on its way into the relay, not twice,
// and the loss rate set is the loss rate of the path. The range is clear of the ports the
// scenarios and campaigns give nodes (7400 QUIC, 7500 and 7600 gossip, 7700 metrics, plus an
// index) and of the kernel's ephemeral ports: a node's packets must never be spared.
const (
	RelayPortLow  = 29100
	RelayPortHigh = 29199
)

// Relay is a userspace UDP relay that adds a fixed one-way delay in each direction between
// one client and an upstream address: the kernel here has no delay emulation (no tc netem),
// and loss on loopback costs a round trip of microseconds, which hides what a lost packet
// costs on a real path. Packets keep their order. Use it for QUIC runs (it relays UDP only).
// With the relay inside a lossy namespace, set the loss with ExceptRelays, or each relayed
// datagram meets it twice.
type Relay struct {
	ln, up *net.UDPConn
	delay  time.Duration
	wg     sync.WaitGroup

	mu     sync.Mutex
	client *net.UDPAddr // the first sender of a QUIC packet (and the only client)
}

type delayed struct {
	at  time.Time
	buf []byte
}

// NewRelay listens on 127.0.0.1 (port chosen by the kernel) and forwards to upstream, each
// packet delay later, in both directions.
func NewRelay(upstream string, delay time.Duration) (*Relay, error) {
	ua, err := net.ResolveUDPAddr("udp", upstream)
	if err != nil {
		return nil, err
	}
	ln, err := bindRelayPort(func(port int) (*net.UDPConn, error) {
		return net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	})
	if err != nil {
		return nil, err
	}
	up, err := bindRelayPort(func(port int) (*net.UDPConn, error) {
		// Any local address: upstream may be across a link (scenario 6), not on loopback.
		return net.DialUDP("udp", &net.UDPAddr{Port: port}, ua)
	})
	if err != nil {
		ln.Close()
		return nil, err
	}
	// Room for bursts while the relay's goroutines wait for a CPU: a datagram dropped by a
	// full socket buffer here would be loss the namespace's rule did not decide.
	for _, c := range []*net.UDPConn{ln, up} {
		c.SetReadBuffer(4 << 20)
		c.SetWriteBuffer(4 << 20)
	}
	r := &Relay{ln: ln, up: up, delay: delay}
	toUp := make(chan delayed, 1<<16)
	toClient := make(chan delayed, 1<<16)
	r.wg.Add(4)
	go r.read(ln, toUp, true)
	go r.read(up, toClient, false)
	go r.send(toUp, func(b []byte) { up.Write(b) })
	go r.send(toClient, func(b []byte) {
		r.mu.Lock()
		c := r.client
		r.mu.Unlock()
		if c != nil {
			ln.WriteToUDP(b, c)
		}
	})
	return r, nil
}

// bindRelayPort calls bind with the ports of the relay range in turn until one is free.
func bindRelayPort(bind func(port int) (*net.UDPConn, error)) (*net.UDPConn, error) {
	return bindInRange("relay", "UDP", RelayPortLow, RelayPortHigh, bind)
}

// bindInRange calls bind with the ports low to high in turn until one is free (bind's error
// is no EADDRINUSE, or EADDRNOTAVAIL for a dial's local port).
func bindInRange[C any](what, proto string, low, high int, bind func(port int) (C, error)) (C, error) {
	var zero C
	for port := low; port <= high; port++ {
		c, err := bind(port)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) && !errors.Is(err, syscall.EADDRNOTAVAIL) {
			return zero, fmt.Errorf("lossy: %s: %w", what, err)
		}
	}
	return zero, fmt.Errorf("lossy: %s: every %s port of %d-%d is in use", what, proto, low, high)
}

// Addr is the address clients dial instead of upstream.
func (r *Relay) Addr() string { return r.ln.LocalAddr().String() }

// Close stops the relay and waits for its goroutines.
func (r *Relay) Close() error {
	err := errors.Join(r.ln.Close(), r.up.Close())
	r.wg.Wait()
	return err
}

func (r *Relay) read(c *net.UDPConn, out chan<- delayed, fromClient bool) {
	defer r.wg.Done()
	defer close(out)
	buf := make([]byte, 65536)
	for {
		n, addr, err := c.ReadFromUDP(buf)
		if err != nil {
			return
		}
		if fromClient && n > 0 && buf[0]&0x40 != 0 {
			// Only a QUIC packet (fixed bit set, RFC 9000 17) makes its sender the client: the
			// SDK sends one zero byte from a socket of its own while it dials (client/probe.go).
			r.mu.Lock()
			if r.client == nil {
				r.client = addr
			}
			r.mu.Unlock()
		}
		select {
		case out <- delayed{at: time.Now().Add(r.delay), buf: append([]byte(nil), buf[:n]...)}:
		default: // the queue is full: drop, as a router would
		}
	}
}

func (r *Relay) send(in <-chan delayed, write func([]byte)) {
	defer r.wg.Done()
	for d := range in {
		if wait := time.Until(d.at); wait > 0 {
			time.Sleep(wait)
		}
		write(d.buf)
	}
}
