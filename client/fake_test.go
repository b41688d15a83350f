package client

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
)

// fakeNode is a scripted node for the client's own tests: it answers HELLO with WELCOME and
// hands every further stream (with its reader, after the first frame) to handle, so tests can send what a real node never would.
type fakeNode struct {
	t      *testing.T
	ln     *quic.Listener
	caFile string
	handle func(s *quic.Stream, r *wire.Reader, first wire.Frame)
	wg     sync.WaitGroup

	// only1 makes it a node of a build that speaks protocol version 1 alone: a HELLO of
	// another version gets ERROR 12 and a closed connection.
	only1 atomic.Bool // set after the node accepts: a stray connection may already be served
	// maxVersion, when set, is the highest version it speaks (a node of an older build);
	// 0: wire.Version.
	maxVersion atomic.Uint64
	// opens counts the publish streams that began with PUBLISH_OPEN (any order), which it
	// reads before handing the stream on with its next frame as the first.
	opens atomic.Int32

	mu     sync.Mutex
	conns  []*quic.Conn
	hellos []uint64 // the versions of the HELLOs it read
}

func newFakeNode(t *testing.T, handle func(s *quic.Stream, r *wire.Reader, first wire.Frame)) *fakeNode {
	t.Helper()
	cert, caFile := selfSigned(t)
	ln, err := quic.ListenAddr("127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{wire.ALPN},
		MinVersion:   tls.VersionTLS13,
	}, &quic.Config{MaxIncomingStreams: 1000})
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeNode{t: t, ln: ln, caFile: caFile, handle: handle}
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			c.CloseWithError(0, "")
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

func (f *fakeNode) addr() string { return f.ln.Addr().String() }

func (f *fakeNode) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept(context.Background())
		if err != nil {
			return
		}
		f.mu.Lock()
		f.conns = append(f.conns, c)
		f.mu.Unlock()
		f.wg.Add(1)
		go f.serve(c)
	}
}

func (f *fakeNode) serve(c *quic.Conn) {
	defer f.wg.Done()
	ctrl, err := c.AcceptStream(context.Background())
	if err != nil {
		return
	}
	r := wire.NewReader(ctrl, wire.Limits{})
	fr, err := r.Read()
	hello, ok := fr.(*wire.Hello)
	if err != nil || !ok {
		c.CloseWithError(wire.AppProtocol, "no hello")
		return
	}
	f.mu.Lock()
	f.hellos = append(f.hellos, hello.Version)
	f.mu.Unlock()
	version := hello.Version
	if f.only1.Load() {
		if version != 1 {
			ctrl.Write(wire.Append(nil, &wire.ErrorFrame{Code: wire.CodeVersion, Message: fmt.Sprintf("protocol version %d not supported; this node speaks 1", version)}))
			ctrl.Close()
			select { // the ERROR reaches the client before the close, as from a node
			case <-c.Context().Done():
			case <-time.After(5 * time.Second):
			}
			c.CloseWithError(wire.AppProtocol, "")
			return
		}
	} else {
		version = min(version, wire.Version)
		if m := f.maxVersion.Load(); m != 0 {
			version = min(version, m)
		}
	}
	ctrl.Write(wire.Append(nil, &wire.Welcome{Version: version, Node: "fake", Region: "test", MaxPayload: 200 << 10, MaxFrame: 256 << 10}))
	for {
		s, err := c.AcceptStream(context.Background())
		if err != nil {
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			r := wire.NewReader(s, wire.Limits{})
			fr, err := r.Read()
			if err != nil {
				return
			}
			if _, ok := fr.(*wire.PublishOpen); ok {
				f.opens.Add(1)
				if fr, err = r.Read(); err != nil {
					return
				}
			}
			f.handle(s, r, fr)
		}()
	}
}

// conn returns the i-th accepted connection.
func (f *fakeNode) conn(i int) *quic.Conn {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conns[i]
}

func selfSigned(t *testing.T) (tls.Certificate, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "fake"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, caFile
}

func dialFake(t *testing.T, f *fakeNode) *Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, Options{CAFile: f.caFile}, f.addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestDialOlderNodeSaysHelloInVersion1: a node of a build that speaks only version 1 refuses
// HELLO of version 2 with ERROR 12; the client says hello again, in version 1, and is
// connected. A node of this build answers version 2.
func TestDialOlderNodeSaysHelloInVersion1(t *testing.T) {
	old := newFakeNode(t, func(*quic.Stream, *wire.Reader, wire.Frame) {})
	old.only1.Store(true)
	c := dialFake(t, old)
	old.mu.Lock()
	hellos := slices.Clone(old.hellos)
	old.mu.Unlock()
	if !slices.Equal(hellos, []uint64{wire.Version, 1}) || c.current().version != 1 {
		t.Fatalf("HELLOs %v, version %d; want %d then 1, speaking 1", hellos, c.current().version, wire.Version)
	}

	cur := newFakeNode(t, func(*quic.Stream, *wire.Reader, wire.Frame) {})
	c = dialFake(t, cur)
	cur.mu.Lock()
	hellos = slices.Clone(cur.hellos)
	cur.mu.Unlock()
	if hellos[0] != wire.Version || c.current().version != wire.Version {
		t.Fatalf("HELLOs %v, version %d; want %d", hellos, c.current().version, wire.Version)
	}
}
