package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/internal/wire"
)

func testLogger(t testing.TB) *slog.Logger { return testlog.New(t) }

// newTestNode starts a node on 127.0.0.1 port 0 with its data in t.TempDir(); it is stopped
// by t.Cleanup. mod may change the configuration.
func newTestNode(t testing.TB, mod ...func(*Config)) *Node {
	t.Helper()
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Name: "n1", Region: "test", Logger: testLogger(t)}
	for _, m := range mod {
		m(&cfg)
	}
	return startNode(t, cfg)
}

// startNode starts a node with cfg; it is stopped by t.Cleanup.
func startNode(t testing.TB, cfg Config) *Node {
	t.Helper()
	n, _ := startStoppable(t, cfg)
	return n
}

// startStoppable starts a node with cfg; stop ends it gracefully (a restart may follow on
// the same DataDir), else t.Cleanup ends it abruptly (StopAbruptly).
func startStoppable(t testing.TB, cfg Config) (n *Node, stop func()) {
	t.Helper()
	n, stop, err := startStoppableErr(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n, stop
}

// startStoppableErr is startStoppable that returns New's error.
func startStoppableErr(t testing.TB, cfg Config) (n *Node, stop func(), err error) {
	t.Helper()
	if n, err = New(cfg); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("node Run: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Errorf("node did not stop within 20 s")
			}
		})
	}
	// At the test's end every node stops: none needs the others to see it leave gracefully.
	t.Cleanup(func() { n.StopAbruptly(); stop() })
	return n, stop, nil
}

// waitLinksUp waits until each of nodes has a connected link to every other one and ready
// (when not nil) says it is ready too; it logs the links and fails after timeout.
func waitLinksUp(t testing.TB, nodes map[string]*Node, timeout time.Duration, ready func(*Node) bool) {
	t.Helper()
	testlog.WaitForErr(t, timeout, "the mesh to be ready", func() error {
		for name, n := range nodes {
			up := 0
			for _, l := range n.Federation().Links() {
				if l.Connected {
					up++
				}
			}
			if up != len(nodes)-1 || (ready != nil && !ready(n)) {
				return fmt.Errorf("%s: %d links up, ready %v; its links: %+v", name, up, ready == nil || ready(n), n.Federation().Links())
			}
		}
		return nil
	})
}

// dialNode connects an SDK client to n (trusting its CA); closed by t.Cleanup.
func dialNode(t testing.TB, n *Node, opts client.Options) *client.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if opts.CAFile == "" {
		opts.CAFile = n.CAFile()
	}
	c, err := client.Dial(ctx, opts, n.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawConn speaks the wire protocol directly, so tests can send what the SDK never would.
type rawConn struct {
	t    testing.TB
	conn *quic.Conn
	ctl  *quic.Stream
	w    *wire.Welcome
}

func dialRaw(t testing.TB, n *Node, token string) (*rawConn, error) {
	t.Helper()
	return dialRawConfig(t, n, token, &quic.Config{KeepAlivePeriod: time.Second, MaxIncomingStreams: -1})
}

func dialRawConfig(t testing.TB, n *Node, token string, qc *quic.Config) (*rawConn, error) {
	t.Helper()
	return dialRawHello(t, n, token, qc, wire.Version)
}

// mustDialVersion is mustDial saying hello in protocol version v.
func mustDialVersion(t testing.TB, n *Node, v uint64) *rawConn {
	t.Helper()
	rc, err := dialRawHello(t, n, "", &quic.Config{KeepAlivePeriod: time.Second, MaxIncomingStreams: -1}, v)
	if err != nil {
		t.Fatal(err)
	}
	if rc.w.Version != min(v, wire.Version) {
		t.Fatalf("HELLO of version %d answered with WELCOME of version %d", v, rc.w.Version)
	}
	return rc
}

func dialRawHello(t testing.TB, n *Node, token string, qc *quic.Config, version uint64) (*rawConn, error) {
	t.Helper()
	conn, err := dialRawConn(t, n, qc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ctl, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rc := &rawConn{t: t, conn: conn, ctl: ctl}
	writeFrames(t, ctl, &wire.Hello{Version: version, Client: "raw", Token: token})
	f, err := wire.NewReader(ctl, wire.Limits{}).Read()
	if err != nil {
		return nil, err
	}
	switch f := f.(type) {
	case *wire.Welcome:
		rc.w = f
		return rc, nil
	case *wire.ErrorFrame:
		return nil, f.AsError()
	}
	t.Fatalf("unexpected %s", f.Type())
	return nil, nil
}

// dialRawConn makes a client QUIC connection to n (ALPN quicmq/1, trusting its CA) and
// sends nothing on it; closed by t.Cleanup.
func dialRawConn(t testing.TB, n *Node, qc *quic.Config) (*quic.Conn, error) {
	t.Helper()
	pem, err := os.ReadFile(n.CAFile())
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, n.Addr().String(),
		&tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: []string{wire.ALPN}, MinVersion: tls.VersionTLS13},
		qc)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { conn.CloseWithError(0, "") })
	return conn, nil
}

func mustDial(t testing.TB, n *Node) *rawConn {
	t.Helper()
	rc, err := dialRaw(t, n, "")
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// rawStream is one stream with its frame reader.
type rawStream struct {
	t   testing.TB
	str *quic.Stream
	r   *wire.Reader
}

func (rc *rawConn) open(frames ...wire.Frame) *rawStream {
	rc.t.Helper()
	str, err := rc.conn.OpenStreamSync(context.Background())
	if err != nil {
		rc.t.Fatal(err)
	}
	writeFrames(rc.t, str, frames...)
	return &rawStream{t: rc.t, str: str, r: wire.NewReader(str, wire.Limits{MaxFrame: 8 << 20, MaxPayload: 8 << 20})}
}

func (s *rawStream) send(frames ...wire.Frame) { writeFrames(s.t, s.str, frames...) }

// next reads one frame within 10 s.
func (s *rawStream) next() wire.Frame {
	s.t.Helper()
	f, err := s.read(10 * time.Second)
	if err != nil {
		s.t.Fatalf("read: %v", err)
	}
	return f
}

func (s *rawStream) read(timeout time.Duration) (wire.Frame, error) {
	s.str.SetReadDeadline(time.Now().Add(timeout))
	defer s.str.SetReadDeadline(time.Time{})
	return s.r.Read()
}

// expectError reads until an ERROR frame and returns it.
func (s *rawStream) expectError() *wire.Error {
	s.t.Helper()
	for {
		f := s.next()
		if e, ok := f.(*wire.ErrorFrame); ok {
			return e.AsError()
		}
	}
}

func writeFrames(t testing.TB, w io.Writer, frames ...wire.Frame) {
	t.Helper()
	var b []byte
	for _, f := range frames {
		b = wire.Append(b, f)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatalf("write: %v", err)
	}
}

func isCode(err error, code wire.Code) bool {
	var e *wire.Error
	return errors.As(err, &e) && e.Code == code
}
