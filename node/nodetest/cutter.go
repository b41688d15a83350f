package nodetest

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Cutter forwards UDP datagrams between one client and a node (upstream) until cut, then
// drops them: a node that went silent without closing anything, as after a crash or a
// pulled cable. Clients dial Addr instead of the node. It is closed by t.Cleanup.
type Cutter struct {
	ln, up *net.UDPConn
	cut    atomic.Bool // drop both ways
	mute   atomic.Bool // drop what the node sends, pass what the client sends
	wg     sync.WaitGroup
	mu     sync.Mutex
	client *net.UDPAddr
}

// NewCutter starts a Cutter on 127.0.0.1 in front of upstream ("host:port").
func NewCutter(t testing.TB, upstream string) *Cutter {
	t.Helper()
	ua, err := net.ResolveUDPAddr("udp", upstream)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cutter{}
	if c.ln, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}); err != nil {
		t.Fatal(err)
	}
	if c.up, err = net.DialUDP("udp", nil, ua); err != nil {
		t.Fatal(err)
	}
	c.wg.Add(2)
	go c.pump(c.ln, func(b []byte) { c.up.Write(b) }, true)
	go c.pump(c.up, func(b []byte) {
		c.mu.Lock()
		to := c.client
		c.mu.Unlock()
		if to != nil {
			c.ln.WriteToUDP(b, to)
		}
	}, false)
	t.Cleanup(func() { c.ln.Close(); c.up.Close(); c.wg.Wait() })
	return c
}

// Addr is the address clients dial to reach the node through the Cutter.
func (c *Cutter) Addr() string { return c.ln.LocalAddr().String() }

// Cut drops every datagram from now on, both ways.
func (c *Cutter) Cut() { c.cut.Store(true) }

// Mute drops what the node sends from now on and still passes what the client sends: the
// node gets requests whose answers are lost.
func (c *Cutter) Mute() { c.mute.Store(true) }

func (c *Cutter) pump(from *net.UDPConn, to func([]byte), fromClient bool) {
	defer c.wg.Done()
	buf := make([]byte, 65536)
	for {
		n, addr, err := from.ReadFromUDP(buf)
		if err != nil {
			return
		}
		if fromClient {
			c.mu.Lock()
			c.client = addr
			c.mu.Unlock()
		}
		if !c.cut.Load() && (fromClient || !c.mute.Load()) {
			to(buf[:n])
		}
	}
}
