package client_test

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// natRelay stands between clients and a node as a NAT does: each client address it hears
// from gets a flow with its own upstream socket, so the node sees the relay's port for that
// flow, never the client's. Rebind gives every flow a new upstream socket without telling
// the client (a NAT rebinding): its next datagram leaves from a new port, and the old
// mapping is dropped then. With refuseNew it admits a new client address only when its
// first datagram is a QUIC long-header packet (a handshake), so a migration's path probe
// from a new socket is dropped while a new connection gets through, as with a stateful
// firewall. It is closed by t.Cleanup.
type natRelay struct {
	t         testing.TB
	ln        *net.UDPConn
	node      *net.UDPAddr
	refuseNew atomic.Bool
	refused   atomic.Int64 // datagrams dropped by refuseNew
	wg        sync.WaitGroup

	mu    sync.Mutex
	flows map[string]*relayFlow // by client address
}

type relayFlow struct {
	client *net.UDPAddr
	up     atomic.Pointer[net.UDPConn]
	rebind bool // guarded by natRelay.mu: the next datagram from the client gets a new mapping
}

func newNATRelay(t testing.TB, node string) *natRelay {
	t.Helper()
	na, err := net.ResolveUDPAddr("udp", node)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	r := &natRelay{t: t, ln: ln, node: na, flows: make(map[string]*relayFlow)}
	r.wg.Add(1)
	go r.fromClients()
	t.Cleanup(func() {
		ln.Close()
		r.mu.Lock()
		for _, f := range r.flows {
			f.up.Load().Close()
		}
		r.mu.Unlock()
		r.wg.Wait()
	})
	return r
}

// Addr is what clients dial to reach the node through the relay.
func (r *natRelay) Addr() string { return r.ln.LocalAddr().String() }

// Rebind moves every flow to a new upstream socket (a new source port at the node) at its
// next datagram from the client, and closes the old socket then: what the node still sends
// to the old port is lost, as behind a real NAT.
func (r *natRelay) Rebind() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.flows {
		f.rebind = true
	}
}

// upstream opens a flow's socket towards the node and starts the goroutine that passes the
// node's datagrams on to the client. Called with mu held.
func (r *natRelay) upstream(f *relayFlow) *net.UDPConn {
	up, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		r.t.Errorf("relay: %v", err)
		return nil
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		buf := make([]byte, 65536)
		for {
			n, _, err := up.ReadFromUDP(buf)
			if err != nil {
				return
			}
			r.ln.WriteToUDP(buf[:n], f.client)
		}
	}()
	return up
}

func (r *natRelay) fromClients() {
	defer r.wg.Done()
	buf := make([]byte, 65536)
	for {
		n, addr, err := r.ln.ReadFromUDP(buf)
		if err != nil {
			return
		}
		r.mu.Lock()
		f := r.flows[addr.String()]
		if f == nil {
			if r.refuseNew.Load() && n > 0 && buf[0]&0x80 == 0 { // a short header: no handshake
				r.mu.Unlock()
				r.refused.Add(1)
				continue
			}
			f = &relayFlow{client: addr}
			f.up.Store(r.upstream(f))
			r.flows[addr.String()] = f
		}
		if f.rebind {
			f.rebind = false
			f.up.Swap(r.upstream(f)).Close()
		}
		r.mu.Unlock()
		f.up.Load().WriteToUDP(buf[:n], r.node)
	}
}
