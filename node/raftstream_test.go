package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/certs"
	"github.com/quicmq/quicmq/internal/wire"
)

// TestRaftStreamGoesToFederation: a peer's stream that starts with RAFT is handed to the
// federation (which refuses it here: the node does not run the raft transport yet), not
// refused by the session as an unknown kind of stream.
func TestRaftStreamGoesToFederation(t *testing.T) {
	m := newTestMesh(t, "eu")
	n := m.nodes["eu"]
	ca, _, err := certs.EnsureCA(m.caDir)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Issue("node-other", []string{"node-other"})
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, n.Addr().String(), &tls.Config{
		Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: "node-eu",
		NextProtos: []string{wire.PeerALPN}, MinVersion: tls.VersionTLS13,
	}, &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(0, "")
	str, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := wire.NewWriter(str)
	w.Write(&wire.Raft{Class: wire.RaftControl, From: 1, To: 2})
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	fr, err := wire.NewReader(str, wire.Limits{}).Read()
	if err != nil {
		t.Fatal(err)
	}
	e, ok := fr.(*wire.ErrorFrame)
	if !ok || e.Code != wire.CodeForbidden || !strings.Contains(e.Message, "raft transport is off") {
		t.Fatalf("got %v, want ERROR forbidden from the federation's raft transport", fr)
	}
}

// TestRaftStreamRefusedToClients: a client's stream that starts with RAFT is refused with
// ERROR forbidden, as WATCH and MIRROR are, with or without a mesh.
func TestRaftStreamRefusedToClients(t *testing.T) {
	n := newTestNode(t)
	s := mustDial(t, n).open(&wire.Raft{Class: wire.RaftBulk, From: 1, To: 2})
	fr, err := s.r.Read()
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := fr.(*wire.ErrorFrame); !ok || e.Code != wire.CodeForbidden || !strings.Contains(e.Message, "RAFT is for node-to-node links") {
		t.Fatalf("got %v, want ERROR forbidden", fr)
	}
}
