package main

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/node"
	"github.com/quicmq/quicmq/node/nodetest"
)

func TestCertsCommandsBadFlags(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"certs"}, "a subcommand is required"},
		{[]string{"certs", "sign"}, `unknown subcommand "sign"`},
		{[]string{"certs", "ca"}, "--dir is required"},
		{[]string{"certs", "node", "--ca-dir", dir, "--name", "n1", "--out", dir}, "--host is required"},
		{[]string{"certs", "client", "--name", "a", "--out", dir}, "--ca-dir, --name and --out are required"},
		{[]string{"certs", "verify", "--cert", "a"}, "--cert, --key and --ca are required"},
		{[]string{"certs", "verify", "--cert", "a", "--key", "b", "--ca", "c", "--usage", "peer"}, `--usage "peer"`},
	}
	for _, c := range cases {
		code, _, stderr := runCLI(t, "", c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, stderr, c.want)
		}
	}
	// Issuing from a directory without a CA fails, and creates no CA there.
	code, _, stderr := runCLI(t, "", "certs", "client", "--ca-dir", dir, "--name", "a", "--out", filepath.Join(dir, "out"))
	if code != 1 || !strings.Contains(stderr, "no CA") || !strings.Contains(stderr, "quicmq certs ca --dir") {
		t.Errorf("client from an empty CA dir: exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "ca.pem")); err == nil {
		t.Error("issuing from an empty directory created a CA")
	}
}

// TestCertsEndToEnd is the operator's path: create a CA, issue a node certificate and a
// client certificate, check them, start a node on the issued certificate, and connect a
// client that trusts only the issued ca.pem.
func TestCertsEndToEnd(t *testing.T) {
	root := t.TempDir()
	caDir, nodeDir, clientDir := filepath.Join(root, "ca"), filepath.Join(root, "n1"), filepath.Join(root, "alice")

	code, out, stderr := runCLI(t, "", "certs", "ca", "--dir", caDir)
	if code != 0 || !strings.Contains(out, "created CA") {
		t.Fatalf("certs ca: exit %d, %q %q", code, out, stderr)
	}
	caPEM := mustReadFile(filepath.Join(caDir, "ca.pem"))
	// Running it again keeps the CA: nodes already trust it.
	if code, out, _ = runCLI(t, "", "certs", "ca", "--dir", caDir); code != 0 || !strings.Contains(out, "kept the existing CA") {
		t.Fatalf("certs ca again: exit %d, %q", code, out)
	}
	if string(mustReadFile(filepath.Join(caDir, "ca.pem"))) != string(caPEM) {
		t.Fatal("certs ca replaced an existing CA")
	}

	code, out, stderr = runCLI(t, "", "certs", "node", "--ca-dir", caDir, "--name", "n1", "--host", "localhost,127.0.0.1", "--out", nodeDir)
	if code != 0 || !strings.Contains(out, "names: n1, localhost, 127.0.0.1") {
		t.Fatalf("certs node: exit %d, %q %q", code, out, stderr)
	}
	code, out, stderr = runCLI(t, "", "certs", "client", "--ca-dir", caDir, "--name", "alice", "--out", clientDir)
	if code != 0 || !strings.Contains(out, "client.pem") {
		t.Fatalf("certs client: exit %d, %q %q", code, out, stderr)
	}
	if _, err := os.Stat(filepath.Join(nodeDir, "ca-key.pem")); err == nil {
		t.Fatal("the CA's key was copied into a node's directory")
	}

	nodeCert, nodeKey, issuedCA := filepath.Join(nodeDir, "node.pem"), filepath.Join(nodeDir, "node-key.pem"), filepath.Join(nodeDir, "ca.pem")
	if code, out, stderr = runCLI(t, "", "certs", "verify", "--cert", nodeCert, "--key", nodeKey, "--ca", issuedCA); code != 0 || !strings.HasPrefix(out, "ok: ") {
		t.Fatalf("certs verify node: exit %d, %q %q", code, out, stderr)
	}
	clientCert, clientKey := filepath.Join(clientDir, "client.pem"), filepath.Join(clientDir, "client-key.pem")
	code, _, stderr = runCLI(t, "", "certs", "verify", "--cert", clientCert, "--key", clientKey, "--ca", issuedCA)
	if code != 1 || !strings.Contains(stderr, "incompatible key usage") {
		t.Fatalf("a client certificate verified as a server's: exit %d, %q", code, stderr)
	}
	if code, _, stderr = runCLI(t, "", "certs", "verify", "--usage", "client", "--cert", clientCert, "--key", clientKey, "--ca", issuedCA); code != 0 {
		t.Fatalf("certs verify client: exit %d, %q", code, stderr)
	}
	if code, out, _ = runCLI(t, "", "certs", "show", "--file", nodeCert); code != 0 || !strings.Contains(out, "usage:   server, client") || !strings.Contains(out, "expires in 36") {
		t.Fatalf("certs show: exit %d, %q", code, out)
	}

	pair, err := tls.LoadX509KeyPair(nodeCert, nodeKey)
	if err != nil {
		t.Fatal(err)
	}
	n := startCLINode(t, func(c *node.Config) { c.TLS = &tls.Config{Certificates: []tls.Certificate{pair}} })
	if code, out, stderr = runCLI(t, "", "topics", "--server", n.addr, "--ca", issuedCA); code != 0 {
		t.Fatalf("topics against a node on the issued certificate: exit %d, %q %q", code, out, stderr)
	}
	// A client trusting another CA refuses that node.
	other := filepath.Join(root, "other")
	if code, _, _ = runCLI(t, "", "certs", "ca", "--dir", other); code != 0 {
		t.Fatal("certs ca other")
	}
	if code, _, stderr = runCLI(t, "", "topics", "--server", n.addr, "--ca", filepath.Join(other, "ca.pem")); code == 0 {
		t.Fatal("a client trusting another CA connected")
	}
}

// TestCertsClientAuthenticatesToNode: a node on the CA made by `certs ca` accepts the
// certificate made by `certs client` as the credential with that subject, and refuses a
// node certificate offered by a client.
func TestCertsClientAuthenticatesToNode(t *testing.T) {
	root := t.TempDir()
	caDir := filepath.Join(root, "ca")
	for _, args := range [][]string{
		{"certs", "ca", "--dir", caDir},
		{"certs", "client", "--ca-dir", caDir, "--name", "alice", "--out", filepath.Join(root, "alice")},
		{"certs", "node", "--ca-dir", caDir, "--name", "rogue", "--host", "localhost", "--out", filepath.Join(root, "rogue")},
	} {
		if code, out, stderr := runCLI(t, "", args...); code != 0 {
			t.Fatalf("%v: exit %d, %q %q", args, code, out, stderr)
		}
	}
	n, _ := nodetest.Start(t, func(c *node.Config) {
		c.CADir = caDir
		c.Credentials = []node.Credential{{Subject: "alice", Tenant: "acme"}}
	})
	dial := func(dir, cert, key string) error {
		pair, err := tls.LoadX509KeyPair(filepath.Join(root, dir, cert), filepath.Join(root, dir, key))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := client.Dial(ctx, client.Options{
			CAFile:    filepath.Join(root, dir, "ca.pem"),
			TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}},
		}, n.Addr().String())

		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Publish(ctx, client.Message{Topic: "orders", Payload: []byte("x")})
		return err
	}
	if err := dial("alice", "client.pem", "client-key.pem"); err != nil {
		t.Fatalf("client certificate from 'certs client': %v", err)
	}
	if err := dial("rogue", "node.pem", "node-key.pem"); err == nil {
		t.Fatal("a node certificate was accepted as a client's")
	}
	// The CLI's --cert/--key: alice publishes into her tenant's namespace.
	code, out, errOut := runCLI(t, "hello\n", "pub", "--server", n.Addr().String(), "--ca", filepath.Join(root, "alice", "ca.pem"),
		"--cert", filepath.Join(root, "alice", "client.pem"), "--key", filepath.Join(root, "alice", "client-key.pem"), "--topic", "orders")
	if code != 0 || out != "1\thello\n" {
		t.Fatalf("pub --cert: exit %d, %q %s", code, out, errOut)
	}
	if _, next, _ := n.Log().Bounds("acme.orders"); next != 2 {
		t.Fatalf("acme.orders next offset %d, want 2", next)
	}
}
