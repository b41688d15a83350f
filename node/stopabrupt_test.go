package node

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/wal"
)

// TestStopAbruptlyLeavesNothing stops a replicated region of three the way every harness's
// cleanup does (StopAbruptly, then the context ends), the node that leads the most last,
// and checks that nothing is left: no goroutine of this module or of serf/memberlist that
// the mesh started, every QUIC and gossip port free to bind again, and every log closed
// (Pebble's lock taken again by wal.Open). Each node's stop is timed: a graceful stop
// spends up to gossip's LeaveTimeout leaving (2.3 s with ProfileTest), an abrupt one
// should not. With QUICMQ_STOP_PROBE set it also times a graceful teardown of the same
// mesh, for comparison.
func TestStopAbruptlyLeavesNothing(t *testing.T) {
	modes := []bool{true}
	if os.Getenv("QUICMQ_STOP_PROBE") != "" {
		modes = append(modes, false)
	}
	for _, abrupt := range modes {
		t.Run(fmt.Sprintf("abrupt=%v", abrupt), func(t *testing.T) {
			before := goroutineIDs()
			m := newRegionMesh(t, []string{"eu"}, 3, func(c *Config) { c.Replicas = 3; c.Raft = TestRaftSettings() })
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c := dialNode(t, m.nodes[m.names[0]], resendingOptions)
			publishTopics(ctx, t, c, "teardown", 10)
			c.Close()

			type held struct{ quic, lan, wan, log string }
			var ports []held
			for _, k := range m.names {
				n := m.nodes[k]
				ports = append(ports, held{n.Addr().String(), n.Gossip().LANAddr(), n.Gossip().WANAddr(), filepath.Join(m.cfgs[k].DataDir, "log")})
			}
			start := time.Now()
			for i := len(m.names) - 1; i >= 0; i-- {
				k := m.names[i]
				t0 := time.Now()
				if abrupt {
					m.nodes[k].StopAbruptly()
				}
				m.stop(k)
				t.Logf("%s stopped in %v", k, time.Since(t0))
			}
			t.Logf("the region stopped in %v (abrupt %v)", time.Since(start), abrupt)

			testlog.WaitForErr(t, 10*time.Second, "the mesh's goroutines to exit", func() error {
				if left := newGoroutines(before); len(left) > 0 {
					return fmt.Errorf("%d left, first:\n%s", len(left), left[0])
				}
				return nil
			})
			for _, p := range ports {
				for _, a := range []string{p.quic, p.lan, p.wan} {
					pc, err := net.ListenPacket("udp", a)
					if err != nil {
						t.Errorf("udp %s still held: %v", a, err)
						continue
					}
					pc.Close()
				}
				for _, a := range []string{p.lan, p.wan} {
					ln, err := net.Listen("tcp", a)
					if err != nil {
						t.Errorf("tcp %s still held: %v", a, err)
						continue
					}
					ln.Close()
				}
				l, err := wal.Open(p.log, wal.Options{Logger: testLogger(t)})
				if err != nil {
					t.Errorf("the log %s is still open: %v", p.log, err)
					continue
				}
				l.Close()
			}
		})
	}
}

// goroutineIDs is the set of goroutines running now, by the header line of their stacks.
func goroutineIDs() map[string]bool {
	ids := map[string]bool{}
	for _, g := range goroutineStacks() {
		ids[g[:strings.IndexByte(g, '[')]] = true
	}
	return ids
}

// newGoroutines are the stacks of goroutines not in before that run code of this module or
// of serf and memberlist, other than the test itself.
func newGoroutines(before map[string]bool) []string {
	var out []string
	for _, g := range goroutineStacks() {
		if before[g[:strings.IndexByte(g, '[')]] || strings.Contains(g, "testing.tRunner") {
			continue
		}
		if strings.Contains(g, "github.com/quicmq/quicmq/") || strings.Contains(g, "github.com/hashicorp/") {
			out = append(out, g)
		}
	}
	return out
}

func goroutineStacks() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		out = append(out, string(g))
	}
	return out
}
