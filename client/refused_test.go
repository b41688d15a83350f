package client_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/node"
)

// closedUDPPort returns 127.0.0.1:PORT where nothing listens (a port just released).
func closedUDPPort(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	return addr
}

// A dial to a port where nothing listens fails at once, naming the address, instead of
// after the 5 s handshake timeout; given [closed, live], Dial moves on to the live node at once.
func TestDialRefusedFailsFast(t *testing.T) {
	closed := closedUDPPort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err := client.Dial(ctx, client.Options{}, closed)
	took := time.Since(start)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s (nothing listens): %v after %v, want connection refused", closed, err, took)
	}
	if want := "client: dial " + closed + ": connection refused (nothing listens on that UDP port)"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if took > time.Second {
		t.Errorf("refused after %v: the 5 s handshake timeout decided, not the refusal", took)
	}
	t.Logf("refused in %v: %v", took, err)

	n := newTestNode(t)
	start = time.Now()
	c, err := client.Dial(ctx, client.Options{CAFile: n.CAFile()}, closed, n.Addr().String())
	took = time.Since(start)
	if err != nil {
		t.Fatalf("dial [closed, live]: %v", err)
	}
	defer c.Close()
	if name, _ := c.Node(); name != n.Name() {
		t.Fatalf("connected to %q, want %q", name, n.Name())
	}
	if took > 3*time.Second {
		t.Errorf("[closed, live] connected after %v: the closed address cost a handshake timeout", took)
	}
	t.Logf("[closed, live] connected in %v", took)

	// Every node refused: each is named once, after one prefix.
	closed2 := closedUDPPort(t)
	_, err = client.Dial(ctx, client.Options{}, closed, closed2)
	want := "client: dial " + closed + ": connection refused (nothing listens on that UDP port); dial " + closed2 + ": connection refused (nothing listens on that UDP port)"
	if !errors.Is(err, syscall.ECONNREFUSED) || err == nil || err.Error() != want {
		t.Fatalf("two closed ports: %v, want %q", err, want)
	}
}

// The probe datagram a dial sends is not a QUIC packet: a live node drops it without a log
// line or an error counted, and dials go on as usual.
func TestDialProbeLeavesNodeUndisturbed(t *testing.T) {
	logs := &recordingHandler{}
	n := newTestNode(t, func(c *node.Config) { c.Logger = slog.New(logs) })
	dial(t, n).Close() // the node's start-up lines (an anonymous node warns) are logged by now
	before := logs.count()
	for range 20 {
		c := dial(t, n)
		if _, err := c.Publish(testCtx(t), client.Message{Topic: "t", Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	for _, r := range logs.since(before) {
		if r.Level >= slog.LevelWarn || strings.Contains(r.Message, "packet") {
			t.Errorf("node logged %s %q after probed dials", r.Level, r.Message)
		}
	}
	// Every probe but the last dial's was sent before the last dial's packets, which the node
	// read from the same socket after them: by now it has handled them.
	mfs, err := n.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if !strings.Contains(mf.GetName(), "error") {
			continue
		}
		for _, m := range mf.GetMetric() {
			if v := m.GetCounter().GetValue(); v != 0 {
				t.Errorf("%s %v = %v after probed dials", mf.GetName(), m.GetLabel(), v)
			}
		}
	}
}

// recordingHandler keeps every log record, at every level.
type recordingHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler      { return h }

func (h *recordingHandler) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.recs)
}

func (h *recordingHandler) since(i int) []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]slog.Record(nil), h.recs[i:]...)
}
