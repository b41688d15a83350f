package liveness

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// server is a QUIC endpoint with a fixed stateless reset key on addr; crash ends it as a
// SIGKILL would (no CONNECTION_CLOSE), and a server started again on the same address with
// the same key is the node back from a restart.
type server struct {
	tr       *quic.Transport
	ln       *quic.Listener
	accepted chan *quic.Conn
}

func startServer(t *testing.T, addr string, key *quic.StatelessResetKey, cert tls.Certificate) *server {
	t.Helper()
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	udp, err := net.ListenUDP("udp", ua)
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp, StatelessResetKey: key}
	ln, err := tr.Listen(&tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"test"}},
		&quic.Config{MaxIdleTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s := &server{tr: tr, ln: ln, accepted: make(chan *quic.Conn, 16)}
	go func() { // accept and keep connections until the transport ends
		for {
			qc, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			s.accepted <- qc
		}
	}()
	t.Cleanup(s.crash)
	return s
}

func (s *server) crash() {
	s.tr.Close()
	s.tr.Conn.Close()
}

func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "liveness"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// dialWatched dials s with keep-alives every keepAlive and a 30 s idle timeout: only a reset
// (or the watch's own Timeout) can end the connection within a test's time.
func dialWatched(t *testing.T, s *server, keepAlive time.Duration, p *Probe) *quic.Conn {
	t.Helper()
	addr := s.tr.Conn.LocalAddr().String()
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	var pc net.PacketConn = udp
	if p != nil {
		pc = p.Wrap(udp)
	}
	tr := &quic.Transport{Conn: pc}
	t.Cleanup(func() { tr.Close(); udp.Close() })
	ua, _ := net.ResolveUDPAddr("udp", addr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	qc, err := tr.Dial(ctx, ua, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"test"}},
		&quic.Config{KeepAlivePeriod: keepAlive, MaxIdleTimeout: 30 * time.Second,
			DisablePathMTUDiscovery: true}) // its padded probes would draw a reset too, for a while
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qc.CloseWithError(0, "") })
	select { // the server has the connection: a crash now ends it without a word
	case <-s.accepted:
	case <-ctx.Done():
		t.Fatal("the server did not accept the connection")
	}
	// Settled: the handshake's last frames (HANDSHAKE_DONE, connection IDs, tickets) are
	// acknowledged, which makes packets large enough to draw a reset; from here on the
	// client sends keep-alives only. Three answered keep-alives show it.
	for base := qc.ConnectionStats().PacketsReceived; qc.ConnectionStats().PacketsReceived < base+3; {
		select {
		case <-qc.Context().Done():
			t.Fatalf("connection ended while settling: %v", context.Cause(qc.Context()))
		case <-time.After(keepAlive / 4):
		}
	}
	return qc
}

// A peer that crashed and came back on the same address with the same stateless reset key
// ends an idle connection at the first reset probe after its return, long before any idle
// timeout; without probes the keep-alives (25-byte packets) draw no reset and the connection
// lives on.
func TestResetProbeEndsConnectionToRestartedPeer(t *testing.T) {
	cert := selfSigned(t)
	var key quic.StatelessResetKey
	rand.Read(key[:])
	s := startServer(t, "127.0.0.1:0", &key, cert)
	addr := s.tr.Conn.LocalAddr().String()
	const keepAlive = 100 * time.Millisecond

	p := NewProbe(nil)
	probed := dialWatched(t, s, keepAlive, p)
	bare := dialWatched(t, s, keepAlive, nil)
	watchDone := make(chan bool, 1)
	go func() { watchDone <- Watch(context.Background(), probed, p, Config{KeepAlive: keepAlive}) }()

	s.crash()
	startServer(t, addr, &key, cert)
	back := time.Now()

	select {
	case <-probed.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the probed connection to the restarted peer is still open after 10 s")
	}
	took := time.Since(back)
	var sr *quic.StatelessResetError
	if err := context.Cause(probed.Context()); !errors.As(err, &sr) {
		t.Fatalf("the probed connection ended with %v, want a stateless reset", err)
	}
	if took > time.Second {
		t.Errorf("the probed connection ended %v after the peer's return, want within 1 s", took)
	}
	if closed := <-watchDone; closed {
		t.Error("Watch reports it closed the connection; the reset did")
	}
	t.Logf("reset %v after the peer's return, %d probes", took.Round(time.Millisecond), p.Sent())

	// The bare connection sent keep-alives all along (ten periods at least by now, plus
	// the probe timeouts' resends): none drew a reset.
	select {
	case <-bare.Context().Done():
		t.Fatalf("the connection without probes ended too: %v", context.Cause(bare.Context()))
	default:
	}
}

// Watch ends a connection whose peer went silent after Timeout (plus at most a tick), on an
// idle connection with keep-alives.
func TestWatchEndsSilentConnection(t *testing.T) {
	const timeout, keepAlive = time.Second, 500 * time.Millisecond
	qc, done, killed := watchCrashedPeer(t, timeout, keepAlive)
	select {
	case closed := <-done:
		if !closed {
			t.Fatalf("Watch returned without closing: %v", context.Cause(qc.Context()))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the connection to a silent peer is open after 10 s")
	}
	took := time.Since(killed)
	if took > timeout+500*time.Millisecond {
		t.Errorf("closed %v after the peer went silent, want at most %v and two ticks", took, timeout)
	}
	var ae *quic.ApplicationError
	if err := context.Cause(qc.Context()); !errors.As(err, &ae) || ae.ErrorCode != 7 || ae.Remote {
		t.Errorf("the connection ended with %v, want the watch's local close", err)
	}
	t.Logf("closed %v after the peer went silent", took.Round(time.Millisecond))
}

// watchCrashedPeer starts a Watch (Timeout timeout, keep-alives every keepAlive, no probes,
// closing with code 7) of a settled connection to a peer, then crashes the peer: done
// receives what Watch returns.
func watchCrashedPeer(t *testing.T, timeout, keepAlive time.Duration) (qc *quic.Conn, done <-chan bool, crashed time.Time) {
	t.Helper()
	s := startServer(t, "127.0.0.1:0", nil, selfSigned(t))
	qc = dialWatched(t, s, keepAlive, nil)
	ch := make(chan bool, 1)
	go func() {
		ch <- Watch(context.Background(), qc, nil, Config{Timeout: timeout, KeepAlive: keepAlive, Code: 7, Reason: "silent"})
	}()
	s.crash()
	return qc, ch, time.Now()
}
