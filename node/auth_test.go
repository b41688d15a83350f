package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/certs"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"
)

const (
	acmeToken   = "acme-token-0123456789"
	globexToken = "globex-token-0123456789"
	readerToken = "acme-reader-0123456789"
	opsToken    = "operator-token-0123456789"
)

func tenantNode(t *testing.T, mod ...func(*Config)) *Node {
	t.Helper()
	return newTestNode(t, append([]func(*Config){func(c *Config) {
		c.Tokens = []string{opsToken}
		c.Credentials = []auth.Credential{
			{Token: acmeToken, Tenant: "acme", Publish: []string{"orders.>"}},
			{Token: readerToken, Tenant: "acme", Publish: []string{}, Subscribe: []string{"orders.*"}},
			{Token: globexToken, Tenant: "globex"},
		}
	}}, mod...)...)
}

func dialAs(t *testing.T, n *Node, token string) (*client.Conn, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{CAFile: n.CAFile(), Token: token}, n.Addr().String())
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

func mustDialAs(t *testing.T, n *Node, token string) *client.Conn {
	t.Helper()
	c, err := dialAs(t, n, token)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func codeOf(err error) client.Code {
	var e *client.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// TestTenantsAreIsolated: two tenants publish to the "same" topic and get separate logs;
// neither sees the other's records, topics or durable consumers; grants are enforced.
func TestTenantsAreIsolated(t *testing.T) {
	n := tenantNode(t)
	acme, globex := mustDialAs(t, n, acmeToken), mustDialAs(t, n, globexToken)
	ctx := context.Background()
	for i := range 3 {
		ack, err := acme.Publish(ctx, client.Message{Topic: "orders.eu", Payload: fmt.Appendf(nil, "acme-%d", i)})
		if err != nil || ack.Offset != uint64(i) {
			t.Fatalf("acme publish %d: %+v %v", i, ack, err)
		}
	}
	ack, err := globex.Publish(ctx, client.Message{Topic: "orders.eu", Payload: []byte("globex-0")})
	if err != nil || ack.Offset != 0 {
		t.Fatalf("globex's orders.eu must be its own log from offset 0: %+v %v", ack, err)
	}

	// Each sees its own records under its own names.
	for _, c := range []struct {
		conn *client.Conn
		want []string
	}{{acme, []string{"acme-0", "acme-1", "acme-2"}}, {globex, []string{"globex-0"}}} {
		sub, err := c.conn.Subscribe(ctx, ">", client.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range readAll(t, sub, len(c.want), 5*time.Second) {
			if d.topic != "orders.eu" {
				t.Fatalf("record delivered under %q, want the client's name orders.eu", d.topic)
			}
			got = append(got, d.payload)
		}
		sub.Close()
		if !slices.Equal(got, c.want) {
			t.Fatalf("got %v, want %v", got, c.want)
		}
		infos, err := c.conn.Topics(ctx, ">")
		if err != nil || len(infos) != 1 || infos[0].Name != "orders.eu" || infos[0].Next != uint64(len(c.want)) {
			t.Fatalf("listing: %+v %v; want only its own orders.eu", infos, err)
		}
	}
	// The operator's token sees the node's whole namespace.
	ops := mustDialAs(t, n, opsToken)
	infos, err := ops.Topics(ctx, ">")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ti := range infos {
		names = append(names, ti.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"acme.orders.eu", "globex.orders.eu"}) {
		t.Fatalf("operator listing %v", names)
	}

	// Grants: acme publishes only under orders.>; its reader token publishes nothing and
	// subscribes only to patterns inside orders.*.
	if _, err := acme.Publish(ctx, client.Message{Topic: "billing.x", Payload: []byte("x")}); codeOf(err) != client.CodeForbidden {
		t.Fatalf("acme publish to billing.x: %v, want forbidden", err)
	}
	reader := mustDialAs(t, n, readerToken)
	if _, err := reader.Publish(ctx, client.Message{Topic: "orders.eu", Payload: []byte("x")}); codeOf(err) != client.CodeForbidden {
		t.Fatalf("reader publish: %v, want forbidden", err)
	}
	if _, err := reader.Subscribe(ctx, "orders.>", client.SubscribeOptions{}); codeOf(err) != client.CodeForbidden ||
		!strings.Contains(err.Error(), "orders.*") {
		t.Fatalf("reader subscribe orders.>: %v, want forbidden naming the grant", err)
	}
	sub, err := reader.Subscribe(ctx, "orders.*", client.SubscribeOptions{})
	if err != nil {
		t.Fatalf("reader subscribe orders.*: %v", err)
	}
	if got := readAll(t, sub, 3, 5*time.Second); got[2].payload != "acme-2" {
		t.Fatalf("reader got %v", got)
	}
	sub.Close()

	// Durable names are per tenant: the same name is two consumers, stored apart.
	ackFirst := func(c *client.Conn) {
		sub, err := c.Subscribe(ctx, "orders.eu", client.SubscribeOptions{Durable: "worker"})
		if err != nil {
			t.Fatal(err)
		}
		rec, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := sub.Ack(rec); err != nil {
			t.Fatal(err)
		}
		sub.Close()
	}
	ackFirst(acme)
	ackFirst(globex)
	if names := n.Log().PositionNames(""); !slices.Equal(names, []string{"tenant/acme/worker", "tenant/globex/worker"}) {
		t.Fatalf("stored durable names %v", names)
	}
}

// TestTenantLimits: connections and durable consumers per tenant are capped with clear
// errors, and one tenant at its cap does not stop another.
func TestTenantLimits(t *testing.T) {
	n := tenantNode(t, func(c *Config) { c.MaxConnsPerTenant = 2; c.MaxDurablesPerTenant = 1 })
	first := mustDialAs(t, n, acmeToken)
	mustDialAs(t, n, readerToken) // same tenant
	if _, err := dialAs(t, n, acmeToken); codeOf(err) != client.CodeLimit || !strings.Contains(err.Error(), `"acme"`) {
		t.Fatalf("third acme connection: %v, want a limit naming the tenant", err)
	}
	// A connection that ends gives its place back once the node sees it end.
	first.Close()
	testlog.WaitForErr(t, 10*time.Second, "an acme connection after one of the two closed", func() error {
		c, err := dialAs(t, n, acmeToken)
		if err == nil {
			c.Close()
			return nil
		}
		if codeOf(err) != client.CodeLimit {
			t.Fatalf("an acme connection after one of the two closed: %v", err)
		}
		return err
	})
	globex := mustDialAs(t, n, globexToken)
	ctx := context.Background()
	if _, err := globex.Publish(ctx, client.Message{Topic: "a", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	sub, err := globex.Subscribe(ctx, "a", client.SubscribeOptions{Durable: "one"})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sub.Ack(rec)
	sub.Close()
	testlog.WaitFor(t, 5*time.Second, "the durable position stored", func() bool { return len(n.Log().PositionNames("tenant/globex/")) > 0 })
	if _, err := globex.Subscribe(ctx, "a", client.SubscribeOptions{Durable: "two"}); codeOf(err) != client.CodeLimit {
		t.Fatalf("second durable consumer: %v, want a limit", err)
	}
	if sub, err := globex.Subscribe(ctx, "a", client.SubscribeOptions{Durable: "one"}); err != nil {
		t.Fatalf("the existing durable consumer must still work: %v", err)
	} else {
		sub.Close()
	}
}

// TestClientCertificates: a client certificate of the mesh CA authenticates as the
// credential with its subject; a node certificate is refused on the client listener, and a
// client certificate on the peer listener.
func TestClientCertificates(t *testing.T) {
	caDir := t.TempDir()
	n := newTestNode(t, func(c *Config) {
		c.CADir = caDir
		c.Credentials = []auth.Credential{{Subject: "billing-svc", Tenant: "billing"}}
	})
	ca, _, err := certs.EnsureCA(caDir)
	if err != nil {
		t.Fatal(err)
	}
	clientCert, err := ca.Issue("billing-svc", nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		t.Fatal(err)
	}
	nodeCert, err := ca.Issue("billing-svc", nil) // server and client usages: a node's
	if err != nil {
		t.Fatal(err)
	}
	dialCert := func(cert tls.Certificate, token string) (*client.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := client.Dial(ctx, client.Options{
			CAFile: filepath.Join(caDir, "ca.pem"), Token: token,
			TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		}, n.Addr().String())

		if err == nil {
			t.Cleanup(func() { c.Close() })
		}
		return c, err
	}
	c, err := dialCert(clientCert, "")
	if err != nil {
		t.Fatalf("client certificate: %v", err)
	}
	if _, err := c.Publish(context.Background(), client.Message{Topic: "invoices", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := n.Log().Bounds("billing.invoices"); !ok {
		t.Fatal("the certificate's tenant namespace was not applied")
	}
	if _, err := dialCert(nodeCert, ""); err == nil {
		t.Fatal("a node certificate was accepted on the client listener")
	}
	if _, err := dialAs(t, n, ""); codeOf(err) != client.CodeUnauthorized {
		t.Fatalf("no token, no certificate: %v, want unauthorized", err)
	}

	// The peer listener refuses a client certificate.
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = dialPeerTLS(ctx, n.Addr().String(), &tls.Config{
		Certificates: []tls.Certificate{clientCert}, RootCAs: pool, ServerName: "n1",
	})
	if err == nil {
		t.Fatal("a client certificate was accepted on the peer listener")
	}
	t.Logf("client certificate on the peer listener: %v", err)
	// The control: a node certificate is accepted there.
	if _, err := dialPeerTLS(ctx, n.Addr().String(), &tls.Config{
		Certificates: []tls.Certificate{nodeCert}, RootCAs: pool, ServerName: "n1",
	}); err != nil {
		t.Fatalf("a node certificate on the peer listener: %v", err)
	}
}

// dialPeerTLS opens a connection with the peer ALPN, as another node would.
func dialPeerTLS(ctx context.Context, addr string, conf *tls.Config) (*quic.Conn, error) {
	conf.NextProtos = []string{wire.PeerALPN}
	conf.MinVersion = tls.VersionTLS13
	c, err := quic.DialAddr(ctx, addr, conf, &quic.Config{})
	if err != nil {
		return nil, err
	}
	// The server checks the client's certificate after the client's handshake completes:
	// a refused peer sees the connection closed right after.
	select {
	case <-c.Context().Done():
		return nil, context.Cause(c.Context())
	case <-time.After(500 * time.Millisecond):
		c.CloseWithError(0, "")
		return c, nil
	}
}

// A topic or pattern against the grammar is answered with a message a client of any language
// can show as it is: the subject and where it breaks, without the Go package's "routing: ".
func TestInvalidSubjectMessages(t *testing.T) {
	n := newTestNode(t)
	rc := mustDial(t, n)
	pub := rc.open(&wire.Publish{Seq: 0, Topic: "bad..topic", Payload: []byte("x")})
	pe, ok := pub.next().(*wire.PublishError)
	if want := `invalid topic "bad..topic": empty token at byte 4`; !ok || pe.Code != wire.CodeInvalidTopic || pe.Message != want {
		t.Fatalf("publish: got %#v, want code %d %q", pe, wire.CodeInvalidTopic, want)
	}
	for _, first := range []wire.Frame{&wire.Subscribe{Pattern: "a..b"}, &wire.Topics{Pattern: "a..b"}} {
		e := rc.open(first).expectError()
		if want := `invalid pattern "a..b": empty token at byte 2`; e.Code != wire.CodeInvalidTopic || e.Message != want {
			t.Fatalf("%s: got %v, want code %d %q", first.Type(), e, wire.CodeInvalidTopic, want)
		}
	}
}
