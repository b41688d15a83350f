package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestLoadCANeverCreates(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadCA(dir); !errors.Is(err, ErrNoCA) {
		t.Fatalf("LoadCA(empty) = %v, want ErrNoCA", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("LoadCA wrote %d files into an empty directory", len(entries))
	}
	ca, caDir := newTestCA(t)
	got, err := LoadCA(caDir)
	if err != nil || !got.Cert.Equal(ca.Cert) {
		t.Fatalf("LoadCA = %v, %v; want the CA EnsureCA made", got, err)
	}
	if err := os.Remove(filepath.Join(caDir, CAKeyFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCA(caDir); !errors.Is(err, ErrCAKeyMissing) {
		t.Fatalf("LoadCA without key = %v, want ErrCAKeyMissing", err)
	}
}

func TestIssueFilesNodeAndClient(t *testing.T) {
	ca, caDir := newTestCA(t)
	caFile := filepath.Join(caDir, CACertFile)

	nodeDir := filepath.Join(t.TempDir(), "node-a")
	paths, err := ca.IssueFiles(nodeDir, KindNode, "node-a", []string{"node-a", "10.0.0.7", "node-a.example"})
	if err != nil {
		t.Fatal(err)
	}
	checkDirFiles(t, nodeDir, NodeCertFile, NodeKeyFile, CACertFile)
	checkMode(t, paths[1], 0o600)
	if !slices.Equal(mustRead(t, paths[2]), ca.CertPEM) {
		t.Fatal("ca.pem in the output is not the CA's certificate")
	}
	leaf, err := VerifyFiles(paths[0], paths[1], caFile, x509.ExtKeyUsageServerAuth)
	if err != nil {
		t.Fatalf("node certificate as server: %v", err)
	}
	if _, err := VerifyFiles(paths[0], paths[1], caFile, x509.ExtKeyUsageClientAuth); err != nil {
		t.Fatalf("node certificate as client (node-to-node mTLS): %v", err)
	}
	if leaf.Subject.CommonName != "node-a" || len(leaf.IPAddresses) != 1 || !slices.Contains(leaf.DNSNames, "node-a.example") {
		t.Fatalf("node certificate for %q, IPs %v, names %v", leaf.Subject.CommonName, leaf.IPAddresses, leaf.DNSNames)
	}

	clientDir := filepath.Join(t.TempDir(), "alice")
	cpaths, err := ca.IssueFiles(clientDir, KindClient, "alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	checkDirFiles(t, clientDir, ClientCertFile, ClientKeyFile, CACertFile)
	if _, err := VerifyFiles(cpaths[0], cpaths[1], caFile, x509.ExtKeyUsageClientAuth); err != nil {
		t.Fatalf("client certificate as client: %v", err)
	}
	// A client's certificate must never pass for a node's (the peer listener refuses it).
	if _, err := VerifyFiles(cpaths[0], cpaths[1], caFile, x509.ExtKeyUsageServerAuth); err == nil {
		t.Fatal("client certificate verified for ServerAuth")
	}
	// A key from another pair is refused.
	if _, err := VerifyFiles(cpaths[0], paths[1], caFile, x509.ExtKeyUsageClientAuth); err == nil {
		t.Fatal("client certificate with the node's key verified")
	}
	// A bad host is refused before anything is written.
	badDir := filepath.Join(t.TempDir(), "bad")
	if _, err := ca.IssueFiles(badDir, KindNode, "n", []string{"a b"}); !errors.Is(err, ErrBadHost) {
		t.Fatalf("IssueFiles with a bad host = %v, want ErrBadHost", err)
	}
	if _, err := os.Stat(badDir); err == nil {
		t.Fatal("IssueFiles with a bad host created the output directory")
	}

	// The client certificate authenticates over mutual TLS against a server trusting the CA.
	nodePair, err := tls.LoadX509KeyPair(paths[0], paths[1])
	if err != nil {
		t.Fatal(err)
	}
	clientPair, err := tls.LoadX509KeyPair(cpaths[0], cpaths[1])
	if err != nil {
		t.Fatal(err)
	}
	pool, err := LoadCAPool(caFile)
	if err != nil {
		t.Fatal(err)
	}
	ccfg := clientConfig(pool, clientPair)
	ccfg.ServerName = "node-a.example"
	srv, cli := handshake(t, serverConfig(nodePair, pool), ccfg)
	if srv.err != nil || cli.err != nil {
		t.Fatalf("mTLS with a client certificate: server %v, client %v", srv.err, cli.err)
	}
	if cn := srv.state.PeerCertificates[0].Subject.CommonName; cn != "alice" {
		t.Fatalf("server sees client %q", cn)
	}
}

// TestCARotationBundle is the rotation the docs describe: a new CA is trusted next to
// the old one (a bundle), certificates are reissued from the new one, then the old CA
// is dropped from the bundle and its certificates stop verifying.
func TestCARotationBundle(t *testing.T) {
	oldCA, oldDir := newTestCA(t)
	newCA, newDir := newTestCA(t)
	bundle := filepath.Join(t.TempDir(), "bundle.pem")
	write(t, bundle, append(slices.Clone(oldCA.CertPEM), newCA.CertPEM...))

	oldPaths, err := oldCA.IssueFiles(t.TempDir(), KindNode, "n1", []string{"localhost"})
	if err != nil {
		t.Fatal(err)
	}
	newPaths, err := newCA.IssueFiles(t.TempDir(), KindNode, "n1", []string{"localhost"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range [][]string{oldPaths, newPaths} {
		if _, err := VerifyFiles(p[0], p[1], bundle, x509.ExtKeyUsageServerAuth); err != nil {
			t.Fatalf("during rotation, %s: %v", p[0], err)
		}
	}
	newOnly := filepath.Join(newDir, CACertFile)
	if _, err := VerifyFiles(oldPaths[0], oldPaths[1], newOnly, x509.ExtKeyUsageServerAuth); err == nil {
		t.Fatal("after rotation, a certificate of the old CA still verifies")
	}
	if _, err := VerifyFiles(newPaths[0], newPaths[1], filepath.Join(oldDir, CACertFile), x509.ExtKeyUsageServerAuth); err == nil {
		t.Fatal("a certificate of the new CA verifies against the old CA alone")
	}

	infos, err := Inspect(mustRead(t, bundle))
	if err != nil || len(infos) != 2 || !infos[0].IsCA || !infos[1].IsCA {
		t.Fatalf("Inspect(bundle) = %+v, %v; want two CAs", infos, err)
	}
	infos, err = Inspect(mustRead(t, newPaths[0]))
	if err != nil || len(infos) != 1 || infos[0].IsCA || !slices.Equal(infos[0].Usage, []string{"server", "client"}) {
		t.Fatalf("Inspect(node.pem) = %+v, %v", infos, err)
	}
	if _, err := Inspect([]byte("not pem")); !errors.Is(err, ErrNoCertificate) {
		t.Fatalf("Inspect(junk) = %v, want ErrNoCertificate", err)
	}
}
