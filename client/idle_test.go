package client_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
)

// cutter forwards UDP datagrams between one client and upstream until cut, then drops them
// all: a node that went silent without closing anything (a crash without restart, a cable).
type cutter struct {
	ln, up *net.UDPConn
	cut    atomic.Bool // drop both ways
	mute   atomic.Bool // drop what the node sends, pass what the client sends
	wg     sync.WaitGroup
	mu     sync.Mutex
	client *net.UDPAddr
}

func newCutter(t *testing.T, upstream string) *cutter {
	t.Helper()
	ua, err := net.ResolveUDPAddr("udp", upstream)
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{}
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

func (c *cutter) pump(from *net.UDPConn, to func([]byte), fromClient bool) {
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

// TestIdleTimeout: with Options.IdleTimeout, a node that goes silent is noticed after about
// that long: a publish fails with a lost connection instead of hanging for QUIC's default
// 30 s (the test's own deadline is 20 s).
func TestIdleTimeout(t *testing.T) {
	n := newTestNode(t)
	path := newCutter(t, n.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, path.ln.LocalAddr().String(), client.Options{CAFile: n.CAFile(), IdleTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Publish(ctx, client.Message{Topic: "idle", Payload: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	path.cut.Store(true)
	began := time.Now()
	_, err = c.Publish(ctx, client.Message{Topic: "idle", Payload: []byte("after")})
	took := time.Since(began)
	if err == nil || errors.Is(err, context.DeadlineExceeded) || took > 5*time.Second {
		t.Fatalf("publish on a silent path: %v after %v; want the connection lost after about 1 s", err, took)
	}
	t.Logf("publish on a silent path failed after %v: %v", took.Round(time.Millisecond), err)
}
