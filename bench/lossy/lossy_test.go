package lossy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

func needHarness(t *testing.T) {
	t.Helper()
	if err := Check(); err != nil {
		t.Skipf("lossy-network harness unavailable: %v", err)
	}
}

// TestMain lets the test binary run as a helper inside a namespace (see udpHelper).
func TestMain(m *testing.M) {
	if mode := os.Getenv("LOSSY_HELPER"); mode != "" {
		if f := strings.Fields(mode); len(f) > 1 {
			os.Exit(linkHelper(f))
		}
		os.Exit(udpHelper(mode))
	}
	os.Exit(m.Run())
}

// linkHelper, inside a namespace: "recv ADDR" counts datagrams arriving on ADDR for a second
// after the first (or two seconds without any) and prints the count; "send ADDR N" sends N.
func linkHelper(args []string) int {
	switch args[0] {
	case "recv":
		la, _ := net.ResolveUDPAddr("udp4", args[1])
		c, err := net.ListenUDP("udp4", la)
		if err != nil {
			return 2
		}
		c.SetReadBuffer(8 << 20)
		os.Stdout.WriteString("ready\n")
		buf := make([]byte, 64)
		n := 0
		deadline := time.Now().Add(2 * time.Second)
		for {
			c.SetReadDeadline(deadline)
			if _, _, err := c.ReadFromUDP(buf); err != nil {
				break
			}
			if n == 0 {
				deadline = time.Now().Add(time.Second)
			}
			n++
		}
		os.Stdout.WriteString(strconv.Itoa(n) + "\n")
	case "send", "relaysend":
		ra, _ := net.ResolveUDPAddr("udp4", args[1])
		if args[0] == "relaysend" { // through a Relay in this namespace, as scenario 6 does
			r, err := NewRelay(args[1], 0)
			if err != nil {
				os.Stderr.WriteString(err.Error() + "\n")
				return 2
			}
			defer r.Close()
			ra, _ = net.ResolveUDPAddr("udp4", r.Addr())
		}
		c, err := net.DialUDP("udp4", nil, ra)
		if err != nil {
			return 2
		}
		n, _ := strconv.Atoi(args[2])
		for i := 0; i < n; i++ {
			c.Write([]byte("x"))
			if i%20 == 19 {
				time.Sleep(time.Millisecond) // pace: stay under the socket buffer
			}
		}
	}
	return 0
}

// udpHelper sends N datagrams from one socket to another on 127.0.0.1 (each crosses lo's
// input hook once) and prints how many arrived. "relay:N" sends them through a Relay, where
// each crosses the input hook twice: into the relay and out of it.
func udpHelper(mode string) int {
	viaRelay := strings.HasPrefix(mode, "relay:")
	n, _ := strconv.Atoi(strings.TrimPrefix(mode, "relay:"))
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return 2
	}
	rx.SetReadBuffer(8 << 20) // a starved reader must not lose datagrams to a full buffer
	to := rx.LocalAddr().(*net.UDPAddr)
	if viaRelay {
		r, err := NewRelay(to.String(), 0)
		if err != nil {
			return 2
		}
		defer r.Close()
		to, _ = net.ResolveUDPAddr("udp4", r.Addr())
	}
	tx, err := net.DialUDP("udp4", nil, to)
	if err != nil {
		return 2
	}
	got := make(chan int)
	go func() {
		buf := make([]byte, 64)
		c := 0
		for {
			rx.SetReadDeadline(time.Now().Add(time.Second))
			if _, _, err := rx.ReadFromUDP(buf); err != nil {
				got <- c
				return
			}
			c++
		}
	}()
	for i := 0; i < n; i++ {
		tx.Write([]byte("x"))
		if i%20 == 19 {
			time.Sleep(time.Millisecond) // stay under the socket buffer
		}
	}
	os.Stdout.WriteString(strconv.Itoa(<-got))
	return 0
}

func countInside(t *testing.T, ns *Namespace, n int) int {
	t.Helper()
	return countHelper(t, ns, strconv.Itoa(n))
}

func countHelper(t *testing.T, ns *Namespace, mode string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := ns.Command(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), "LOSSY_HELPER="+mode)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper in %s: %v", ns.Name, err)
	}
	got, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("helper output %q", out)
	}
	return got
}

func TestLossDropsOnInput(t *testing.T) {
	needHarness(t)
	ns, err := New("loss")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	const n = 4000
	if got := countInside(t, ns, n); got != n {
		t.Fatalf("no loss set: %d of %d datagrams arrived", got, n)
	}
	if err := ns.SetLoss(0.2); err != nil {
		t.Fatal(err)
	}
	got := countInside(t, ns, n)
	dropped, err := ns.Dropped()
	if err != nil {
		t.Fatal(err)
	}
	// 20% of 4000: 800 expected, standard deviation ~25.
	if lost := n - got; lost < 650 || lost > 950 {
		t.Fatalf("20%% loss: %d of %d datagrams lost", lost, n)
	}
	if dropped < int64(n-got) {
		t.Fatalf("nft counted %d drops, %d datagrams lost", dropped, n-got)
	}
	if err := ns.SetLoss(0); err != nil {
		t.Fatal(err)
	}
	if got := countInside(t, ns, n); got != n {
		t.Fatalf("loss removed: %d of %d arrived", got, n)
	}
}

// TestRelayLossOnce: with ExceptRelays, a datagram through a Relay meets the namespace's loss
// once, so the rate set is the rate of the relayed path (without it, 20% set costs ~36%).
func TestRelayLossOnce(t *testing.T) {
	needHarness(t)
	ns, err := New("relayloss")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if err := ns.SetLossMatch(0.2, ExceptRelays); err != nil {
		t.Fatal(err)
	}
	const n = 4000
	got := countHelper(t, ns, "relay:"+strconv.Itoa(n))
	// 20% of 4000: 800 expected, standard deviation ~25; twice exposed would be 1440.
	if lost := n - got; lost < 650 || lost > 950 {
		t.Fatalf("20%% loss through the relay: %d of %d datagrams lost", lost, n)
	}
}

// crossLink sends n datagrams from a to b's end of l and returns how many arrived.
func crossLink(t *testing.T, l *Link, n int) int {
	t.Helper()
	return crossLinkBy(t, l, n, "send")
}

// crossLinkBy is crossLink with the sender's mode: "send", or "relaysend" through a Relay
// in a.
func crossLinkBy(t *testing.T, l *Link, n int, mode string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	addr := l.AddrB + ":9999"
	recv := l.B.Command(ctx, os.Args[0])
	recv.Env = append(os.Environ(), "LOSSY_HELPER=recv "+addr)
	out, err := recv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := recv.Start(); err != nil {
		t.Fatal(err)
	}
	defer recv.Wait()
	r := bufio.NewReader(out)
	if line, err := r.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("receiver: %q %v", line, err)
	}
	send := l.A.Command(ctx, os.Args[0])
	send.Env = append(os.Environ(), "LOSSY_HELPER="+mode+" "+addr+" "+strconv.Itoa(n))
	if out, err := send.CombinedOutput(); err != nil {
		t.Fatalf("sender (%s): %v %s", mode, err, out)
	}
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("receiver: %v", err)
	}
	got, _ := strconv.Atoi(strings.TrimSpace(line))
	return got
}

// A link carries datagrams between two namespaces until Partition, and again after Heal;
// CloseAll removes both namespaces (and with them the link).
func TestLinkPartitionAndCleanup(t *testing.T) {
	needHarness(t)
	a, err := New("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := New("b")
	if err != nil {
		t.Fatal(err)
	}
	defer CloseAll()
	l, err := Connect(a, b)
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	if got := crossLink(t, l, n); got != n {
		t.Fatalf("link up: %d of %d datagrams arrived", got, n)
	}
	// A relay whose upstream is across the link (scenario 6's) reaches it. (A relay starved
	// of CPU may drop a few from a socket buffer: what matters here is that it gets through.)
	if got := crossLinkBy(t, l, n, "relaysend"); got < n*9/10 {
		t.Fatalf("through a relay across the link: %d of %d datagrams arrived", got, n)
	}
	if err := l.Partition(); err != nil {
		t.Fatal(err)
	}
	if got := crossLink(t, l, n); got != 0 {
		t.Fatalf("partitioned: %d of %d datagrams arrived", got, n)
	}
	if err := l.Heal(); err != nil {
		t.Fatal(err)
	}
	if got := crossLink(t, l, n); got != n {
		t.Fatalf("healed: %d of %d datagrams arrived", got, n)
	}
	CloseAll()
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), a.Name) || strings.Contains(string(out), b.Name) {
		t.Fatalf("namespaces left after CloseAll:\n%s", out)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestRelayDelays: a packet through the relay and back takes at least twice the delay, and
// arrives whole. Needs no root.
func TestRelayDelays(t *testing.T) {
	echo := udpEcho(t)
	r, err := NewRelay(echo.LocalAddr().String(), 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c, err := net.Dial("udp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 3 {
		start := time.Now()
		msg := []byte(fmt.Sprintf("ping %d", i))
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		if rtt := time.Since(start); rtt < 40*time.Millisecond || string(buf[:n]) != string(msg) {
			t.Fatalf("round trip %v with %q, want >= 40 ms and %q", rtt, buf[:n], msg)
		}
	}
}

// TestTCPRelayDelays: bytes through the TCP relay and back take at least twice the delay and
// arrive whole and in order; closing the relay ends its connections. Needs no root.
func TestTCPRelayDelays(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	r, err := NewTCPRelay(echo.Addr().String(), 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 3 {
		start := time.Now()
		msg := fmt.Sprintf("ping %d", i)
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
		if rtt := time.Since(start); rtt < 40*time.Millisecond || string(buf) != msg {
			t.Fatalf("round trip %v with %q, want >= 40 ms and %q", rtt, buf, msg)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read after the relay closed: want an error")
	}
}

// TestRelayIgnoresProbe: a datagram that is no QUIC packet (the SDK's one zero byte from a
// socket of its own while it dials) does not make its sender the relay's client.
func TestRelayIgnoresProbe(t *testing.T) {
	echo := udpEcho(t)
	r, err := NewRelay(echo.LocalAddr().String(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	probe, err := net.Dial("udp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	if _, err := probe.Write([]byte{0}); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("udp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := []byte{0x40, 'q'} // fixed bit set: a QUIC packet's first byte
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 64)
	for {
		// The probe's echo may come back to the client (the relay has one): skip it.
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("client: %v; want its own datagram back", err)
		}
		if string(buf[:n]) == string(msg) {
			return
		}
	}
}

// udpEcho is a UDP server on loopback that sends every datagram back, closed by t.Cleanup.
func udpEcho(t *testing.T) *net.UDPConn {
	t.Helper()
	echo, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { echo.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, a, err := echo.ReadFromUDP(buf)
			if err != nil {
				return
			}
			echo.WriteToUDP(buf[:n], a)
		}
	}()
	return echo
}
