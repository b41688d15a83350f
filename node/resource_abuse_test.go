package node_test

// Campaign 6 (resource abuse), against a real node on 127.0.0.1 (node/nodetest): each test
// attacks one resource a peer controls, then checks that the node is up, that a fresh
// well-behaved client publishes and receives within a deadline (other clients
// unaffected), and that the memory and goroutines it holds are bounded. Figures are
// logged (go test -v -run Abuse ./node); docs/reliability.md quotes them.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node"
	"github.com/quicmq/quicmq/node/nodetest"
)

// abuseConn is a raw QUIC connection that has said HELLO: the tests send what the SDK
// never would.
type abuseConn struct {
	t    testing.TB
	conn *quic.Conn
}

func caPool(t testing.TB, n *node.Node) *x509.CertPool {
	t.Helper()
	pem, err := os.ReadFile(n.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return pool
}

func clientTLS(t testing.TB, n *node.Node) *tls.Config {
	return &tls.Config{RootCAs: caPool(t, n), ServerName: "localhost", NextProtos: []string{wire.ALPN}, MinVersion: tls.VersionTLS13}
}

func dialAbuse(t testing.TB, n *node.Node) *abuseConn {
	t.Helper()
	return dialAbuseConfig(t, n, &quic.Config{MaxIncomingStreams: -1, KeepAlivePeriod: time.Second})
}

func dialAbuseConfig(t testing.TB, n *node.Node, qc *quic.Config) *abuseConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, n.Addr().String(), clientTLS(t, n), qc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.CloseWithError(0, "") })
	ctl, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ctl.Write(wire.Append(nil, &wire.Hello{Version: wire.Version, Client: "abuse"})); err != nil {
		t.Fatal(err)
	}
	ctl.SetReadDeadline(time.Now().Add(10 * time.Second))
	if f, err := wire.NewReader(ctl, wire.Limits{}).Read(); err != nil {
		t.Fatalf("hello: %v", err)
	} else if _, ok := f.(*wire.Welcome); !ok {
		t.Fatalf("hello: got %s", f.Type())
	}
	return &abuseConn{t: t, conn: conn}
}

// stream opens a stream, writes raw bytes, and returns it with a reader.
func (a *abuseConn) stream(raw []byte) (*quic.Stream, *wire.Reader) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := a.conn.OpenStreamSync(ctx)
	if err != nil {
		a.t.Fatal(err)
	}
	if _, err := s.Write(raw); err != nil {
		a.t.Fatal(err)
	}
	return s, wire.NewReader(s, wire.Limits{MaxFrame: 8 << 20, MaxPayload: 8 << 20})
}

// readError reads frames until an ERROR frame, within 10 s.
func readError(t testing.TB, s *quic.Stream, r *wire.Reader) *wire.Error {
	t.Helper()
	s.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := r.Read()
		if err != nil {
			t.Fatalf("read: %v (want an ERROR frame)", err)
		}
		if e, ok := f.(*wire.ErrorFrame); ok {
			return e.AsError()
		}
	}
}

// checkHealthy is the "other clients are unaffected" judge: a fresh SDK client connects,
// publishes one record and reads it back through a new subscription, all within 10 s.
func checkHealthy(t testing.TB, n *node.Node, what string) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{CAFile: n.CAFile(), Name: "healthy"}, n.Addr().String())
	if err != nil {
		t.Fatalf("%s: a well-behaved client cannot connect: %v", what, err)
	}
	defer c.Close()
	topic := fmt.Sprintf("health.check%d", time.Now().UnixNano())
	payload := []byte("still here")
	ack, err := c.Publish(ctx, client.Message{Topic: topic, Payload: payload})
	if err != nil {
		t.Fatalf("%s: a well-behaved client cannot publish: %v", what, err)
	}
	sub, err := c.Subscribe(ctx, topic, client.SubscribeOptions{})
	if err != nil {
		t.Fatalf("%s: a well-behaved client cannot subscribe: %v", what, err)
	}
	defer sub.Close()
	r, err := sub.Next(ctx)
	if err != nil || r.Offset != ack.Offset || !bytes.Equal(r.Payload, payload) {
		t.Fatalf("%s: a well-behaved client read %+v, %v", what, r, err)
	}
	return time.Since(start)
}

// heapInUse is the process's live heap after a GC, in bytes: node and attackers share the
// process, so it bounds what the node holds from above.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

const mib = 1 << 20

// waitGoroutines waits until at most limit goroutines run, and returns the count.
func waitGoroutines(limit int, within time.Duration) int {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	testlog.Until(ctx, func() bool { return runtime.NumGoroutine() <= limit })
	return runtime.NumGoroutine()
}

// TestAbuseManyStreamOpens opens 10,000 streams on one connection, each left with half a
// frame: the node holds at most MaxStreamsPerConn of them at once (QUIC stream credit),
// frees each when the peer resets it, and serves everyone else meanwhile.
func TestAbuseManyStreamOpens(t *testing.T) {
	const maxStreams, total = 256, 10_000
	n, _ := nodetest.Start(t, func(c *node.Config) { c.MaxStreamsPerConn = maxStreams })
	checkHealthy(t, n, "before")
	baseHeap, baseG := heapInUse(), runtime.NumGoroutine()
	a := dialAbuse(t, n)
	half := []byte{byte(wire.TypePublish), 0, 0, 1, 0, 1, 2, 3} // declares 256 body bytes, sends 3

	var held []*quic.Stream
	opened := 0
	// Fill the stream credit: the control stream is one of them.
	for range maxStreams - 1 {
		s, _ := a.stream(half)
		held = append(held, s)
		opened++
	}
	// The next open finds no credit: the cap holds on the attacker's side of the wire.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := a.conn.OpenStreamSync(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stream %d beyond MaxStreamsPerConn=%d: %v, want to wait for credit", maxStreams+1, maxStreams, err)
	}
	fullHeap, fullG := heapInUse(), runtime.NumGoroutine()
	checkHealthy(t, n, "with every stream of one connection held")
	// Churn: reset the oldest half, open as many new ones, until 10,000 were opened.
	// (In halves: QUIC returns stream credit in batches, one stream at a time would
	// wait for an ack delay each.)
	for opened < total {
		k := min(len(held)/2, total-opened)
		for _, old := range held[:k] {
			old.CancelWrite(0)
			old.CancelRead(0)
		}
		held = held[k:]
		for range k {
			s, _ := a.stream(half)
			held = append(held, s)
			opened++
		}
	}
	checkHealthy(t, n, "after 10,000 stream opens")
	for _, s := range held {
		s.CancelWrite(0)
		s.CancelRead(0)
	}
	g := waitGoroutines(baseG+20, 10*time.Second)
	endHeap := heapInUse()
	t.Logf("%d streams opened (%d held at once): heap %.1f MiB before, %.1f MiB with %d held (%.1f KiB each), %.1f MiB after; goroutines %d before, %d held, %d after",
		opened, len(held)+1, float64(baseHeap)/mib, float64(fullHeap)/mib, maxStreams,
		float64(int64(fullHeap)-int64(baseHeap))/1024/maxStreams, float64(endHeap)/mib, baseG, fullG, g)
	if g > baseG+20 {
		t.Errorf("goroutines %d after the streams were reset, %d before: stream handlers leak", g, baseG)
	}
	if per := (int64(fullHeap) - int64(baseHeap)) / maxStreams; per > 64<<10 {
		t.Errorf("a held stream costs %d bytes of heap: want < 64 KiB", per)
	}
}

// TestAbuseHugeLengthPrefix declares a 4 GiB frame, on a stream and on the control stream
// of a new connection: the node refuses it at once from the 5-byte header (it never
// allocates the body) and the connection, or at least the node, carries on.
func TestAbuseHugeLengthPrefix(t *testing.T) {
	n, _ := nodetest.Start(t)
	base := heapInUse()
	a := dialAbuse(t, n)
	hdr := []byte{byte(wire.TypePublish), 0xff, 0xff, 0xff, 0xff}
	for i := range 20 {
		// A few body bytes only: the node stops reading after the header, so a long
		// write would fail with its STOP_SENDING before the ERROR is read.
		s, r := a.stream(append(hdr, bytes.Repeat([]byte{0xab}, 16)...))
		e := readError(t, s, r)
		if e.Code != wire.CodeTooLarge {
			t.Fatalf("4 GiB frame %d: %v, want code %d (too large)", i, e, wire.CodeTooLarge)
		}
		s.CancelWrite(0)
	}
	// The same connection still publishes.
	s, r := a.stream(wire.Append(nil, &wire.Publish{Seq: 1, Topic: "after.huge", Payload: []byte("x")}))
	s.SetReadDeadline(time.Now().Add(10 * time.Second))
	if f, err := r.Read(); err != nil {
		t.Fatal(err)
	} else if _, ok := f.(*wire.PublishAck); !ok {
		t.Fatalf("publish after the 4 GiB frames: %#v", f)
	}
	// Before HELLO, on the control stream: the connection is refused, the node lives.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, n.Addr().String(), clientTLS(t, n), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ctl.Write([]byte{byte(wire.TypeHello), 0xff, 0xff, 0xff, 0xff, 1, 2, 3})
	ctl.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = wire.NewReader(ctl, wire.Limits{}).Read()
	select {
	case <-conn.Context().Done():
	case <-time.After(10 * time.Second):
		t.Errorf("a connection whose HELLO declares 4 GiB is still open (read: %v)", err)
	}
	conn.CloseWithError(0, "")
	grown := int64(heapInUse()) - int64(base)
	t.Logf("21 frames declaring 4 GiB: refused; heap grew %.1f MiB", float64(grown)/mib)
	if grown > 64*mib {
		t.Errorf("heap grew %d MiB for frames that were refused", grown/mib)
	}
	checkHealthy(t, n, "after 4 GiB length prefixes")
}

// TestAbuseSubscriberNeverReads: subscribers that never read cost the node a cursor and a
// bounded read-ahead, not memory proportional to their lag (I5), and do not slow a reader
// of the same topic.
func TestAbuseSubscriberNeverReads(t *testing.T) {
	records, size := 1000, 8<<10 // 8 MiB of backlog; ABUSE_LONG=1: 64 MiB
	if os.Getenv("ABUSE_LONG") != "" {
		records = 8000
	}
	stalled := 10 // ABUSE_LONG=1: 20
	if os.Getenv("ABUSE_LONG") != "" {
		stalled = 20
	}
	n, _ := nodetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pub := dialClient(t, n) // metrics_test.go
	payload := make([]byte, size)
	rand.Read(payload)
	if err := nodetest.PublishPipelined(ctx, pub, "backlog.t", payload, records); err != nil {
		t.Fatal(err)
	}
	// A reader first, so the block cache is as warm as it gets before the measurement.
	drain := func(what string) time.Duration {
		start := time.Now()
		sub, err := pub.Subscribe(ctx, "backlog.t", client.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		for i := range records {
			if _, err := sub.Next(ctx); err != nil {
				t.Fatalf("%s: record %d: %v", what, i, err)
			}
		}
		return time.Since(start)
	}
	alone := drain("reader alone")
	base := heapInUse()

	var held []*quic.Stream
	for range stalled {
		a := dialAbuse(t, n)
		s, r := a.stream(wire.Append(nil, &wire.Subscribe{Pattern: "backlog.t"}))
		s.SetReadDeadline(time.Now().Add(10 * time.Second))
		if f, err := r.Read(); err != nil {
			t.Fatal(err)
		} else if _, ok := f.(*wire.Subscribed); !ok {
			t.Fatalf("subscribe: %#v", f)
		}
		held = append(held, s) // and never read again
	}
	testlog.Pause(context.Background(), 500*time.Millisecond) // a measurement: each stalled subscriber fills its windows
	withStalled := drain("reader beside stalled subscribers")
	grown := int64(heapInUse()) - int64(base)
	backlog := int64(records * size)
	t.Logf("%d subscribers never reading a %.0f MiB backlog: heap grew %.1f MiB (%.2f MiB each, %.1f%% of the backlog each); a reader drained it in %v alone, %v beside them",
		stalled, float64(backlog)/mib, float64(grown)/mib, float64(grown)/float64(stalled)/mib, 100*float64(grown)/float64(stalled)/float64(backlog), alone.Round(time.Millisecond), withStalled.Round(time.Millisecond))
	// Bounded: stream window (1 MiB) + read-ahead (256 KiB) + slack per stalled stream.
	if grown > int64(stalled)*3*mib {
		t.Errorf("stalled subscribers cost %d MiB: more than 3 MiB each", grown/mib)
	}
	if withStalled > 5*alone+2*time.Second {
		t.Errorf("a reader took %v beside stalled subscribers, %v alone", withStalled, alone)
	}
	checkHealthy(t, n, "beside stalled subscribers")
	for _, s := range held {
		s.CancelRead(0)
	}
}

// discardReads is a PacketConn that never delivers a packet: a QUIC client on it sends
// its Initial and never hears the answer, so the server is left with a half-open
// handshake.
type discardReads struct {
	net.PacketConn
	closed chan struct{}
	once   sync.Once
}

func (d *discardReads) ReadFrom([]byte) (int, net.Addr, error) {
	<-d.closed
	return 0, nil, net.ErrClosed
}

func (d *discardReads) Close() error {
	d.once.Do(func() { close(d.closed) })
	return d.PacketConn.Close()
}

// TestAbuseHalfOpenHandshakes: 1,000 (ABUSE_LONG=1: 5,000) abandoned QUIC handshakes (Initials whose sender never
// answers) and 5,000 junk datagrams to the QUIC port. The node keeps at most a bounded
// number of handshakes (quic-go answers with Retry past its limit), drops each after
// HandshakeTimeout, and serves others meanwhile.
func TestAbuseHalfOpenHandshakes(t *testing.T) {
	dials := 1000 // ABUSE_LONG=1: 5,000
	if os.Getenv("ABUSE_LONG") != "" {
		dials = 5000
	} else if testing.Short() {
		dials = 300
	}
	n, _ := nodetest.Start(t, func(c *node.Config) { c.HandshakeTimeout = time.Second })
	checkHealthy(t, n, "before")
	base, baseG := heapInUse(), runtime.NumGoroutine()

	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	dr := &discardReads{PacketConn: udp, closed: make(chan struct{})}
	tr := &quic.Transport{Conn: dr}
	defer tr.Close()
	defer dr.Close() // first: quic-go does not close a socket it was given, and waits for its reader
	var wg sync.WaitGroup
	var refused atomic.Int64
	sem := make(chan struct{}, 100)
	start := time.Now()
	for range dials {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
			defer cancel()
			if _, err := tr.Dial(ctx, n.Addr(), clientTLS(t, n), &quic.Config{HandshakeIdleTimeout: time.Second}); err != nil {
				refused.Add(1)
			}
		})
	}
	wg.Wait()
	// Junk: long-header-looking garbage of Initial size, and short random datagrams.
	junk, err := net.DialUDP("udp", nil, n.Addr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer junk.Close()
	buf := make([]byte, 1200)
	for i := range 5000 {
		rand.Read(buf)
		if i%2 == 0 {
			buf[0] = 0xc0 | buf[0]&0x0f
			binary.BigEndian.PutUint32(buf[1:], 1) // QUIC v1
			buf[5] = 8
			junk.Write(buf)
		} else {
			junk.Write(buf[:1+i%64])
		}
	}
	sent := time.Since(start)
	during := checkHealthy(t, n, "during the half-open handshakes")
	peakHeap, peakG := heapInUse(), runtime.NumGoroutine()
	testlog.Pause(context.Background(), 1500*time.Millisecond) // > HandshakeTimeout, the timeout under test: every half-open handshake is dropped
	g := waitGoroutines(baseG+20, 10*time.Second)
	end := heapInUse()
	t.Logf("%d abandoned handshakes and 5,000 junk datagrams in %v: heap %.1f MiB before, %.1f MiB right after, %.1f MiB %v later; goroutines %d, %d, %d; a client was served in %v meanwhile",
		dials, sent.Round(time.Millisecond), float64(base)/mib, float64(peakHeap)/mib, float64(end)/mib, 1500*time.Millisecond, baseG, peakG, g, during.Round(time.Millisecond))
	if refused.Load() != int64(dials) {
		t.Errorf("%d of %d dials that never hear the server completed", int64(dials)-refused.Load(), dials)
	}
	if g > baseG+20 {
		t.Errorf("goroutines %d after the handshake timeout, %d before", g, baseG)
	}
	if grown := int64(end) - int64(base); grown > 32*mib {
		t.Errorf("heap still %d MiB above the start after the handshakes timed out", grown/mib)
	}
	checkHealthy(t, n, "after the half-open handshakes")
}

// TestAbuseJunkGossip sends junk to the gossip port (UDP datagrams and TCP streams) of one
// node of a two-node region with encrypted gossip: the node stays up, its peer is never
// marked failed, and clients are served.
func TestAbuseJunkGossip(t *testing.T) {
	key := make([]byte, 32)
	rand.Read(key)
	ca := t.TempDir() // one mesh CA: the nodes' peer links are mutual TLS
	n1, _ := nodetest.Start(t, func(c *node.Config) {
		c.Name, c.GossipLAN, c.GossipKey, c.CADir = "n1", "127.0.0.1:0", key, ca
		c.GossipProfile = gossip.ProfileTest
	})
	lan := n1.Gossip().LANAddr()
	n2, _ := nodetest.Start(t, func(c *node.Config) {
		c.Name, c.GossipLAN, c.GossipKey, c.Join, c.CADir = "n2", "127.0.0.1:0", key, []string{lan}, ca
		c.GossipProfile = gossip.ProfileTest
	})
	waitAlive := func(within time.Duration) bool {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		return testlog.Until(ctx, func() bool {
			alive := 0
			for _, m := range n1.Gossip().RegionMembers("eu") {
				if m.Status == gossip.StatusAlive {
					alive++
				}
			}
			return alive == 2
		}) == nil
	}
	if !waitAlive(10 * time.Second) {
		t.Fatalf("n1 does not see n2 alive: %+v", n1.Gossip().RegionMembers("eu"))
	}
	_ = n2
	checkHealthy(t, n1, "before the junk")

	var flaps atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // watches n2's status on n1 the whole time
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			for _, m := range n1.Gossip().RegionMembers("eu") {
				if m.Name == "n2" && m.Status != gossip.StatusAlive {
					flaps.Add(1)
				}
			}
		}
	})
	udpJunk, err := net.Dial("udp", lan)
	if err != nil {
		t.Fatal(err)
	}
	defer udpJunk.Close()
	buf := make([]byte, 1400)
	start := time.Now()
	for i := range 10_000 {
		rand.Read(buf)
		buf[0] = byte(i % 32) // every memberlist message type, and some beyond
		udpJunk.Write(buf[:1+i%len(buf)])
		if i%1000 == 0 {
			testlog.Pause(context.Background(), 10*time.Millisecond) // pace the junk
		}
	}
	for range 50 {
		c, err := net.DialTimeout("tcp", lan, time.Second)
		if err != nil {
			continue
		}
		rand.Read(buf)
		c.Write(buf)
		c.Close()
	}
	took := time.Since(start)
	testlog.Pause(context.Background(), 2*time.Second) // several probe rounds after the junk: the time is what is under test
	close(stop)
	wg.Wait()
	st := n1.Gossip().Stats()
	t.Logf("10,000 junk datagrams and 50 junk TCP streams to the gossip port in %v: n2 seen not alive in %d samples; gossip stats %+v",
		took.Round(time.Millisecond), flaps.Load(), st)
	if flaps.Load() > 0 {
		t.Errorf("n2 was seen not alive %d times while junk hit n1's gossip port", flaps.Load())
	}
	if !waitAlive(5 * time.Second) {
		t.Errorf("after the junk n1 sees %+v", n1.Gossip().RegionMembers("eu"))
	}
	checkHealthy(t, n1, "after junk on the gossip port")
}
