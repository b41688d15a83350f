package client_test

import (
	"context"
	"crypto/x509"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/certs"
	"github.com/quicmq/quicmq/node"
)

// Options.CertFile and KeyFile present a client certificate: a node that knows clients only
// by certificate accepts it as the credential with its subject (and tenant), and refuses the
// same client without one. One file without the other is refused before any dial.
func TestClientCertificateFiles(t *testing.T) {
	caDir := t.TempDir()
	n := newTestNode(t, func(c *node.Config) {
		c.CADir = caDir
		c.Credentials = []node.Credential{{Subject: "billing-svc", Tenant: "billing"}}
	})
	ca, _, err := certs.EnsureCA(caDir)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Issue("billing-svc", nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	if err := certs.WritePair(certFile, keyFile, cert); err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(caDir, "ca.pem")
	dialWith := func(o client.Options) (*client.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		o.CAFile = caFile
		c, err := client.Dial(ctx, o, n.Addr().String())
		if err == nil {
			t.Cleanup(func() { c.Close() })
		}
		return c, err
	}

	c, err := dialWith(client.Options{CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatalf("dial with a client certificate: %v", err)
	}
	if _, err := c.Publish(testCtx(t), client.Message{Topic: "invoices", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := n.Log().Bounds("billing.invoices"); !ok {
		t.Fatal("the publish did not land in the certificate's tenant namespace (billing.invoices)")
	}
	if _, err := dialWith(client.Options{}); errorCode(err) != client.CodeUnauthorized {
		t.Fatalf("without the certificate: %v, want unauthorized", err)
	}

	for _, tc := range []struct {
		opts client.Options
		want string
	}{
		{client.Options{CertFile: certFile}, "client: client certificate " + certFile + ": KeyFile is not set"},
		{client.Options{KeyFile: keyFile}, "client: client key " + keyFile + ": CertFile is not set"},
		{client.Options{CertFile: filepath.Join(dir, "missing.pem"), KeyFile: keyFile}, "missing.pem"},
		{client.Options{CertFile: keyFile, KeyFile: certFile}, "client: client certificate " + keyFile + " with key " + certFile + ": "},
	} {
		start := time.Now()
		_, err := dialWith(tc.opts)
		t.Logf("CertFile %q KeyFile %q: %v", filepath.Base(tc.opts.CertFile), filepath.Base(tc.opts.KeyFile), err)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CertFile %q KeyFile %q: %v, want it to say %q", tc.opts.CertFile, tc.opts.KeyFile, err, tc.want)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("CertFile %q KeyFile %q: refused after %v; a bad option needs no dial", tc.opts.CertFile, tc.opts.KeyFile, d)
		}
	}
}

// errorCode is the Code of the *client.Error in err's chain, 0 without one.
func errorCode(err error) client.Code {
	var e *client.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}
