package federation

import (
	"log/slog"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
)

// A node stopping deliberately closes its links with the "node shutting down" close code
// (wire.AppShutdown, docs/protocol.md), and neither side logs a WARN or an ERROR about it:
// the stopping node logs "link closed: node stopping", its peer "link closed: peer
// stopping", both at INFO, where a lost link would be a WARN.
func TestDeliberateStopLogsNoWarning(t *testing.T) {
	m := newFedMesh(t)
	a := m.addNode("a", nodeOpts{mirror: []string{"stop.>"}})
	b := m.addNode("b", nodeOpts{mirror: []string{"stop.>"}})
	a.publishSeq(t, "stop.a", 0, 200)
	b.publishSeq(t, "stop.b", 0, 200)
	testlog.WaitFor(t, 10*time.Second, "mirrored both ways", func() bool {
		return a.next("stop.b") == 200 && b.next("stop.a") == 200
	})

	b.stop() // its federation first (its own links), then its listener (a's link to it)
	// a hears it from b's CONNECTION_CLOSE ("peer stopping") or, when the list of peers
	// drops b before a's link has read that close, from the list ("left the mesh"): both
	// are a deliberate stop, and neither may be a WARN (checked below).
	testlog.WaitFor(t, 10*time.Second, "a to notice that b stopped", func() bool {
		return len(a.logs.find(slog.LevelInfo, "link closed: peer stopping")) > 0 ||
			len(a.logs.find(slog.LevelInfo, "link closed: the peer left the mesh")) > 0
	})
	if li, _ := a.link("b"); li.Connected {
		t.Fatal("a's link to b still connected after b stopped")
	}
	if got := b.logs.find(slog.LevelInfo, "link closed: node stopping"); len(got) == 0 {
		t.Fatal(`b logged no "link closed: node stopping"`)
	}
	a.stop()
	for _, n := range []*fedNode{a, b} {
		if bad := n.logs.find(slog.LevelWarn, ""); len(bad) > 0 {
			t.Errorf("%s logged at WARN or above around a deliberate stop:%s", n.name, fmtRecords(bad))
		}
	}
}
