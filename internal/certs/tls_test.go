package certs

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

type side struct {
	state tls.ConnectionState
	err   error
}

// handshake runs a TLS handshake over a loopback TCP connection, then sends one
// byte from server to client. The byte matters: in TLS 1.3 the client finishes its
// handshake before the server has checked the client's certificate, and learns of
// a rejection only on reading. (Loopback rather than net.Pipe: a pipe has no
// buffer, so a side that fails mid-flight and writes an alert while the other is
// still writing would deadlock until the deadline.)
func handshake(t *testing.T, server, client *tls.Config) (srv, cli side) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	deadline := time.Now().Add(10 * time.Second)
	var wg sync.WaitGroup
	wg.Go(func() {
		raw, err := ln.Accept()
		if err != nil {
			srv.err = err
			return
		}
		defer raw.Close() // the raw end: tls.Conn.Close would try to send close_notify
		raw.SetDeadline(deadline)
		s := tls.Server(raw, server)
		if srv.err = s.Handshake(); srv.err == nil {
			srv.state = s.ConnectionState()
			_, srv.err = s.Write([]byte{1})
		}
	})
	wg.Go(func() {
		raw, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			cli.err = err
			return
		}
		defer raw.Close()
		raw.SetDeadline(deadline)
		c := tls.Client(raw, client)
		if cli.err = c.Handshake(); cli.err == nil {
			cli.state = c.ConnectionState()
			var b [1]byte
			_, cli.err = io.ReadFull(c, b[:])
		}
	})
	wg.Wait()
	return srv, cli
}

func serverConfig(cert tls.Certificate, clientCAs *x509.CertPool) *tls.Config {
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
	if clientCAs != nil {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		cfg.ClientCAs = clientCAs
	}
	return cfg
}

// clientConfig presents cert, if given, whatever CAs the server asks for: with
// plain Certificates a Go client would withhold a certificate from another CA, and
// the server's own check would go untested.
func clientConfig(roots *x509.CertPool, cert ...tls.Certificate) *tls.Config {
	cfg := &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS13}
	if len(cert) > 0 {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert[0], nil }
	}
	return cfg
}

func TestTLSHandshake(t *testing.T) {
	ca, caDir := newTestCA(t)
	pool, err := LoadCAPool(filepath.Join(caDir, CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := EnsureNodeCert(t.TempDir(), ca, "node-1", []string{"localhost", "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}

	srv, cli := handshake(t, serverConfig(cert, nil), clientConfig(pool))
	if srv.err != nil || cli.err != nil {
		t.Fatalf("handshake: server %v, client %v", srv.err, cli.err)
	}
	if cli.state.Version != tls.VersionTLS13 {
		t.Fatalf("negotiated version %#x, want TLS 1.3", cli.state.Version)
	}
	if cn := cli.state.PeerCertificates[0].Subject.CommonName; cn != "node-1" {
		t.Fatalf("client sees server %q", cn)
	}

	// A client that trusts another CA rejects the server.
	otherDir := t.TempDir()
	if _, _, err := EnsureCA(otherDir); err != nil {
		t.Fatal(err)
	}
	otherPool, err := LoadCAPool(filepath.Join(otherDir, CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	srv, cli = handshake(t, serverConfig(cert, nil), clientConfig(otherPool))
	var unknown x509.UnknownAuthorityError
	if !errors.As(cli.err, &unknown) || srv.err == nil {
		t.Fatalf("handshake with another CA: client %v (want unknown authority), server %v", cli.err, srv.err)
	}

	// A server name that is not among the SANs is rejected too.
	wrongName := clientConfig(pool)
	wrongName.ServerName = "elsewhere.example"
	if _, cli = handshake(t, serverConfig(cert, nil), wrongName); cli.err == nil {
		t.Fatal("handshake with a name not in the certificate succeeded")
	}
}

func TestMutualTLS(t *testing.T) {
	// Two nodes share one CA directory and each issues its own certificate.
	shared := t.TempDir()
	caA, _, err := EnsureCA(shared)
	if err != nil {
		t.Fatal(err)
	}
	caB, created, err := EnsureCA(shared)
	if err != nil || created {
		t.Fatalf("second node: created %v, %v", created, err)
	}
	hosts := []string{"localhost", "127.0.0.1"}
	nodeA, err := EnsureNodeCert(t.TempDir(), caA, "node-a", hosts)
	if err != nil {
		t.Fatal(err)
	}
	nodeB, err := EnsureNodeCert(t.TempDir(), caB, "node-b", hosts)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := LoadCAPool(filepath.Join(shared, CACertFile))
	if err != nil {
		t.Fatal(err)
	}

	for _, pair := range []struct {
		name           string
		server, client tls.Certificate
	}{{"a serves b", nodeA, nodeB}, {"b serves a", nodeB, nodeA}} {
		srv, cli := handshake(t, serverConfig(pair.server, pool), clientConfig(pool, pair.client))
		if srv.err != nil || cli.err != nil {
			t.Fatalf("%s: server %v, client %v", pair.name, srv.err, cli.err)
		}
		if len(srv.state.VerifiedChains) == 0 ||
			srv.state.PeerCertificates[0].Subject.CommonName != pair.client.Leaf.Subject.CommonName ||
			cli.state.PeerCertificates[0].Subject.CommonName != pair.server.Leaf.Subject.CommonName {
			t.Fatalf("%s: peers not verified as expected", pair.name)
		}
	}

	// Clients the server must turn away: no certificate, a certificate from
	// another CA, and one without the ClientAuth usage.
	other, _, err := newCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.Issue("intruder", hosts)
	if err != nil {
		t.Fatal(err)
	}
	serverOnly, err := caA.Issue("server-only", hosts, x509.ExtKeyUsageServerAuth)
	if err != nil {
		t.Fatal(err)
	}
	for name, certs := range map[string][]tls.Certificate{
		"no certificate":      nil,
		"another CA":          {foreign},
		"no ClientAuth usage": {serverOnly},
	} {
		srv, cli := handshake(t, serverConfig(nodeA, pool), clientConfig(pool, certs...))
		if srv.err == nil || cli.err == nil {
			t.Fatalf("%s: server %v, client %v; want both to fail", name, srv.err, cli.err)
		}
		t.Logf("%s: server: %v", name, srv.err)
	}
}
