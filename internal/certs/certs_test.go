package certs

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

func newTestCA(t *testing.T) (*CA, string) {
	t.Helper()
	dir := t.TempDir()
	ca, created, err := EnsureCA(dir)
	if err != nil || !created {
		t.Fatalf("EnsureCA(empty dir) = created %v, %v", created, err)
	}
	return ca, dir
}

func checkMode(t *testing.T, path string, want fs.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		t.Fatalf("%s has mode %v, want %v", filepath.Base(path), got, want)
	}
}

// checkDirFiles checks that dir holds exactly names (plus the lock file): no
// temporary file is left behind.
func checkDirFiles(t *testing.T, dir string, names ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		if e.Name() != lockFile {
			got = append(got, e.Name())
		}
	}
	slices.Sort(got)
	slices.Sort(names)
	if !slices.Equal(got, names) {
		t.Fatalf("%s holds %v, want %v", dir, got, names)
	}
}

func TestEnsureCACreateAndReload(t *testing.T) {
	ca, dir := newTestCA(t)
	if !ca.Cert.IsCA || ca.Cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Fatalf("CA certificate: IsCA %v, key usage %v", ca.Cert.IsCA, ca.Cert.KeyUsage)
	}
	pub, ok := ca.Cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		t.Fatalf("CA key is %T, want ECDSA P-256", ca.Cert.PublicKey)
	}
	checkDirFiles(t, dir, CACertFile, CAKeyFile)
	checkMode(t, filepath.Join(dir, CAKeyFile), 0o600)
	checkMode(t, filepath.Join(dir, CACertFile), 0o644)
	onDisk, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if err != nil || !bytes.Equal(onDisk, ca.CertPEM) {
		t.Fatalf("ca.pem differs from CA.CertPEM (%v)", err)
	}

	again, created, err := EnsureCA(dir)
	if err != nil || created {
		t.Fatalf("EnsureCA(existing) = created %v, %v", created, err)
	}
	if !again.Cert.Equal(ca.Cert) || !bytes.Equal(again.CertPEM, ca.CertPEM) ||
		!publicKeysEqual(again.Key.Public(), ca.Key.Public()) {
		t.Fatal("reloaded CA differs from the created one")
	}
}

func TestEnsureCABrokenFiles(t *testing.T) {
	_, otherDir := newTestCA(t)
	otherKey, _ := os.ReadFile(filepath.Join(otherDir, CAKeyFile))

	tests := []struct {
		name    string
		setup   func(t *testing.T, dir string)
		wantErr error // nil: a new CA is created
	}{
		{"orphan key from an interrupted creation", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, CAKeyFile), otherKey)
		}, nil},
		{"certificate without key", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, CAKeyFile))
		}, ErrCAKeyMissing},
		{"key of another CA", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, CAKeyFile), otherKey)
		}, ErrKeyMismatch},
		{"garbage certificate", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, CACertFile), []byte("not PEM"))
		}, ErrNoCertificate},
		{"garbage key", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, CAKeyFile), []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"))
		}, errAny},
		{"a leaf certificate", func(t *testing.T, dir string) {
			ca, _, err := EnsureCA(dir)
			if err != nil {
				t.Fatal(err)
			}
			leaf, err := ca.Issue("node", []string{"localhost"})
			if err != nil {
				t.Fatal(err)
			}
			if err := WritePair(filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile), leaf); err != nil {
				t.Fatal(err)
			}
		}, ErrNotCA},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.name != "orphan key from an interrupted creation" {
				if _, _, err := EnsureCA(dir); err != nil {
					t.Fatal(err)
				}
			}
			tt.setup(t, dir)
			certBefore, _ := os.ReadFile(filepath.Join(dir, CACertFile))
			keyBefore, _ := os.ReadFile(filepath.Join(dir, CAKeyFile))
			ca, created, err := EnsureCA(dir)
			if tt.wantErr == nil {
				if err != nil || !created {
					t.Fatalf("EnsureCA = created %v, %v; want a new CA", created, err)
				}
				if _, _, err := EnsureCA(dir); err != nil {
					t.Fatalf("the new CA does not load: %v", err)
				}
				_ = ca
				return
			}
			if err == nil || (tt.wantErr != errAny && !errors.Is(err, tt.wantErr)) {
				t.Fatalf("EnsureCA = %v, want %v", err, tt.wantErr)
			}
			t.Logf("error: %v", err)
			// An unusable CA is never overwritten.
			certAfter, _ := os.ReadFile(filepath.Join(dir, CACertFile))
			keyAfter, _ := os.ReadFile(filepath.Join(dir, CAKeyFile))
			if !bytes.Equal(certBefore, certAfter) || !bytes.Equal(keyBefore, keyAfter) {
				t.Fatal("EnsureCA changed the files of a CA it could not load")
			}
		})
	}
}

var errAny = errors.New("any error")

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestEnsureCAReplacesExpired(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	old, created, err := ensureCA(dir, now)
	if err != nil || !created {
		t.Fatal(created, err)
	}
	// Still valid the day before it expires...
	if _, created, err := ensureCA(dir, old.Cert.NotAfter.Add(-24*time.Hour)); err != nil || created {
		t.Fatalf("EnsureCA before expiry = created %v, %v", created, err)
	}
	// ...and replaced after.
	later := old.Cert.NotAfter.Add(time.Hour)
	ca, created, err := ensureCA(dir, later)
	if err != nil || !created || ca.Cert.Equal(old.Cert) {
		t.Fatalf("EnsureCA after expiry = created %v, %v", created, err)
	}
	if !ca.Cert.NotAfter.After(later) {
		t.Fatal("the replacement CA is not valid")
	}
}

func TestEnsureCAConcurrent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shared") // created by EnsureCA itself
	const n = 8
	cas := make([]*CA, n)
	createdCount := 0
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ca, created, err := EnsureCA(dir)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			cas[i] = ca
			if created {
				createdCount++
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if createdCount != 1 {
		t.Fatalf("%d of %d concurrent EnsureCA calls created a CA, want 1", createdCount, n)
	}
	for _, ca := range cas[1:] {
		if !ca.Cert.Equal(cas[0].Cert) {
			t.Fatal("concurrent EnsureCA calls returned different CAs")
		}
	}
	checkDirFiles(t, dir, CACertFile, CAKeyFile)
}

func TestLoadCAPool(t *testing.T) {
	ca, dir := newTestCA(t)
	pool, err := LoadCAPool(filepath.Join(dir, CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Issue("n1", []string{"localhost"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "localhost"}); err != nil {
		t.Fatalf("issued certificate does not verify against the loaded pool: %v", err)
	}

	empty := filepath.Join(t.TempDir(), "empty.pem")
	write(t, empty, []byte("nothing here\n"))
	if _, err := LoadCAPool(empty); !errors.Is(err, ErrNoCertificate) {
		t.Fatalf("LoadCAPool(no certificates) = %v, want ErrNoCertificate", err)
	}
	if _, err := LoadCAPool(filepath.Join(dir, "missing.pem")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LoadCAPool(missing) = %v, want fs.ErrNotExist", err)
	}
}

func TestIssue(t *testing.T) {
	ca, _ := newTestCA(t)
	before := time.Now()
	cert, err := ca.Issue("node-1", []string{"localhost", "node-1.eu.example", "127.0.0.1", "::1", "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	leaf := cert.Leaf
	if leaf == nil || len(cert.Certificate) != 1 {
		t.Fatal("issued certificate lacks Leaf or has a chain")
	}
	if leaf.Subject.CommonName != "node-1" {
		t.Fatalf("CN = %q", leaf.Subject.CommonName)
	}
	if !slices.Equal(leaf.DNSNames, []string{"localhost", "node-1.eu.example"}) {
		t.Fatalf("DNS SANs = %v", leaf.DNSNames)
	}
	if len(leaf.IPAddresses) != 2 || !leaf.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)) || !leaf.IPAddresses[1].Equal(net.IPv6loopback) {
		t.Fatalf("IP SANs = %v", leaf.IPAddresses)
	}
	if !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}) {
		t.Fatalf("default EKU = %v", leaf.ExtKeyUsage)
	}
	if leaf.IsCA {
		t.Fatal("issued certificate is a CA")
	}
	if d := leaf.NotAfter.Sub(before); d < 364*24*time.Hour || d > 366*24*time.Hour {
		t.Fatalf("validity %v, want a year", d)
	}
	if _, ok := cert.PrivateKey.(*ecdsa.PrivateKey); !ok {
		t.Fatalf("key is %T", cert.PrivateKey)
	}
	if err := leaf.CheckSignatureFrom(ca.Cert); err != nil {
		t.Fatal(err)
	}

	server, err := ca.Issue("srv", []string{"localhost"}, x509.ExtKeyUsageServerAuth)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(server.Leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) {
		t.Fatalf("EKU = %v", server.Leaf.ExtKeyUsage)
	}

	for _, bad := range []string{"", "a b", "host:443"} {
		if _, err := ca.Issue("x", []string{bad}); !errors.Is(err, ErrBadHost) {
			t.Errorf("Issue(host %q) = %v, want ErrBadHost", bad, err)
		}
	}
	if _, err := (*CA)(nil).Issue("x", nil); err == nil {
		t.Error("Issue on a nil CA succeeded")
	}
}

func TestIssueCappedByCAExpiry(t *testing.T) {
	ca, _, err := newCA(time.Now().Add(-caValidity + 30*24*time.Hour)) // expires in 30 days
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Issue("n", []string{"localhost"})
	if err != nil {
		t.Fatal(err)
	}
	if !cert.Leaf.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Fatalf("leaf expires %v, CA %v", cert.Leaf.NotAfter, ca.Cert.NotAfter)
	}
}

func TestEnsureNodeCert(t *testing.T) {
	ca, caDir := newTestCA(t)
	dir := t.TempDir()
	hosts := []string{"localhost", "127.0.0.1"}
	now := time.Now()

	first, why, err := ensureNodeCert(dir, ca, "node-1", hosts, now)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first issue: %s", why)
	checkDirFiles(t, dir, NodeCertFile, NodeKeyFile)
	checkMode(t, filepath.Join(dir, NodeKeyFile), 0o600)
	checkMode(t, filepath.Join(dir, NodeCertFile), 0o644)

	serial := first.Leaf.SerialNumber
	reuse := func(name string, hosts []string, now time.Time) {
		t.Helper()
		cert, why, err := ensureNodeCert(dir, ca, name, hosts, now)
		if err != nil || why != "" || cert.Leaf.SerialNumber.Cmp(serial) != 0 {
			t.Fatalf("ensureNodeCert(%q, %v) reissued (%q, %v), want reuse", name, hosts, why, err)
		}
	}
	reissue := func(name string, hosts []string, now time.Time, wantWhy string) {
		t.Helper()
		cert, why, err := ensureNodeCert(dir, ca, name, hosts, now)
		if err != nil {
			t.Fatal(err)
		}
		if why != wantWhy || cert.Leaf.SerialNumber.Cmp(serial) == 0 {
			t.Fatalf("ensureNodeCert(%q, %v): why %q, want a reissue because %q", name, hosts, why, wantWhy)
		}
		serial = cert.Leaf.SerialNumber
		loaded, err := tls.LoadX509KeyPair(filepath.Join(dir, NodeCertFile), filepath.Join(dir, NodeKeyFile))
		if err != nil || !bytes.Equal(loaded.Certificate[0], cert.Certificate[0]) {
			t.Fatalf("files do not hold the reissued pair (%v)", err)
		}
		checkDirFiles(t, dir, NodeCertFile, NodeKeyFile)
	}

	reuse("node-1", hosts, now)
	reuse("node-1", []string{"127.0.0.1", "LOCALHOST", "localhost"}, now) // same set of hosts
	reuse("node-1", hosts, first.Leaf.NotAfter.Add(-renewBefore-time.Hour))
	reissue("node-1", []string{"localhost", "127.0.0.1", "10.0.0.7"}, now, "issued for other hosts")
	reissue("node-1", []string{"localhost"}, now, "issued for other hosts")
	reissue("node-2", []string{"localhost"}, now, `issued to "node-1"`)

	// A certificate from another CA is replaced by one from this CA.
	other, _, err := newCA(now)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.Issue("node-2", []string{"localhost"})
	if err != nil {
		t.Fatal(err)
	}
	if err := WritePair(filepath.Join(dir, NodeCertFile), filepath.Join(dir, NodeKeyFile), foreign); err != nil {
		t.Fatal(err)
	}
	serial = foreign.Leaf.SerialNumber
	reissue("node-2", []string{"localhost"}, now, "not signed by the CA")

	// A certificate without ClientAuth cannot serve node-to-node mTLS.
	serverOnly, err := ca.Issue("node-2", []string{"localhost"}, x509.ExtKeyUsageServerAuth)
	if err != nil {
		t.Fatal(err)
	}
	if err := WritePair(filepath.Join(dir, NodeCertFile), filepath.Join(dir, NodeKeyFile), serverOnly); err != nil {
		t.Fatal(err)
	}
	serial = serverOnly.Leaf.SerialNumber
	reissue("node-2", []string{"localhost"}, now, "missing ServerAuth or ClientAuth usage")

	// A key that does not match (as after a crash between the two renames).
	write(t, filepath.Join(dir, NodeKeyFile), mustRead(t, filepath.Join(caDir, CAKeyFile)))
	cert, why, err := ensureNodeCert(dir, ca, "node-2", []string{"localhost"}, now)
	if err != nil || why == "" || cert.Leaf.SerialNumber.Cmp(serial) == 0 {
		t.Fatalf("mismatched key: why %q, %v; want a reissue", why, err)
	}
	t.Logf("mismatched key: %s", why)

	// Within 30 days of expiry (the last check: it moves the clock forward).
	serial = cert.Leaf.SerialNumber
	reissue("node-2", []string{"localhost"}, cert.Leaf.NotAfter.Add(-renewBefore+time.Hour),
		"expires "+cert.Leaf.NotAfter.UTC().Format(time.RFC3339))

	if _, err := EnsureNodeCert(dir, ca, "node-2", []string{"bad host"}); !errors.Is(err, ErrBadHost) {
		t.Fatalf("EnsureNodeCert(bad host) = %v", err)
	}
	if _, err := EnsureNodeCert(dir, nil, "node-2", nil); err == nil {
		t.Fatal("EnsureNodeCert without a CA succeeded")
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestWritePair(t *testing.T) {
	ca, _ := newTestCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	for range 2 { // the second round replaces existing files
		cert, err := ca.Issue("client", nil, x509.ExtKeyUsageClientAuth)
		if err != nil {
			t.Fatal(err)
		}
		if err := WritePair(certFile, keyFile, cert); err != nil {
			t.Fatal(err)
		}
		loaded, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil || !bytes.Equal(loaded.Certificate[0], cert.Certificate[0]) {
			t.Fatalf("reloaded pair differs (%v)", err)
		}
		checkMode(t, keyFile, 0o600)
		checkMode(t, certFile, 0o644)
		checkDirFiles(t, dir, "c.pem", "k.pem")
	}
	if err := WritePair(certFile, keyFile, tls.Certificate{}); err == nil {
		t.Fatal("WritePair of an empty certificate succeeded")
	}
	if err := WritePair(filepath.Join(dir, "missing", "c.pem"), filepath.Join(dir, "missing", "k.pem"), tls.Certificate{
		Certificate: [][]byte{{1}}, PrivateKey: ca.Key,
	}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("WritePair into a missing directory = %v", err)
	}
}

func TestParseKeyFormats(t *testing.T) {
	ca, dir := newTestCA(t)
	ec := ca.Key.(*ecdsa.PrivateKey)
	sec1, err := x509.MarshalECPrivateKey(ec)
	if err != nil {
		t.Fatal(err)
	}
	// A SEC 1 key, as openssl ecparam writes it, behind an EC PARAMETERS block.
	data := append([]byte("-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n"),
		pemBlock("EC PRIVATE KEY", sec1)...)
	write(t, filepath.Join(dir, CAKeyFile), data)
	again, created, err := EnsureCA(dir)
	if err != nil || created || !again.Cert.Equal(ca.Cert) {
		t.Fatalf("EnsureCA with a SEC 1 key = created %v, %v", created, err)
	}
	if _, err := parseKey([]byte("no key")); !errors.Is(err, ErrNoKey) {
		t.Fatalf("parseKey(garbage) = %v", err)
	}
}
