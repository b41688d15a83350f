package federation

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
)

// linkUps counts the connections n's links established, to any peer: a link replaced
// establishes one, and then lists every topic again.
func linkUps(n *fedNode) int {
	return len(n.logs.find(slog.LevelInfo, "link up")) + len(n.logs.find(slog.LevelInfo, "link reconnected"))
}

// waitVerdict waits until n's link to peer holds gossip's verdict failed, or was replaced
// or dropped, and returns the link then (nil: none).
func waitVerdict(t *testing.T, n, peer *fedNode, was *link, failed bool) *link {
	t.Helper()
	var l *link
	testlog.WaitFor(t, 10*time.Second, fmt.Sprintf("%s's link to %s to take failed=%v", n.name, peer.name, failed), func() bool {
		var f bool
		l, f = n.fedNow().linkTo(peer.name)
		return l != was || f == failed
	})
	return l
}

// Gossip declares each node failed and then alive again while the QUIC connections between
// them are healthy, as it does seconds after a cut is over (its suspicion outlasts the cut):
// both links are kept, on the same connection, with no new connection and so no listing of
// every topic; records published after the flap are mirrored on them.
func TestLinkKeptThroughGossipFlap(t *testing.T) {
	m := newFedMesh(t)
	a := m.addNode("a", nodeOpts{mirror: []string{"flap.>"}})
	b := m.addNode("b", nodeOpts{mirror: []string{"flap.>"}})
	const topics = 20
	topic := func(n *fedNode, i int) string { return fmt.Sprintf("flap.%s%02d", n.region, i) }
	for i := range topics {
		a.publish(t, topic(a, i), "before")
		b.publish(t, topic(b, i), "before")
	}
	testlog.WaitFor(t, 20*time.Second, "every topic mirrored both ways", func() bool {
		for i := range topics {
			if a.next(topic(b, i)) < 1 || b.next(topic(a, i)) < 1 {
				return false
			}
		}
		return true
	})
	la, _ := a.fedNow().linkTo(b.name)
	lb, _ := b.fedNow().linkTo(a.name)
	infoA, _ := a.link("b")
	infoB, _ := b.link("a")
	upsA, upsB := linkUps(a), linkUps(b)

	// verdict has gossip on both sides declare the other failed (or alive again) and checks
	// that each keeps its link; what says the verdict, with %s for the peer.
	verdict := func(failed bool, what string) {
		t.Helper()
		a.failed.Store(failed)
		b.failed.Store(failed)
		a.fedNow().PeersChanged()
		b.fedNow().PeersChanged()
		if got := waitVerdict(t, a, b, la, failed); got != la {
			t.Fatalf("a's link to b was dropped or replaced when gossip "+what, "b")
		}
		if got := waitVerdict(t, b, a, lb, failed); got != lb {
			t.Fatalf("b's link to a was dropped or replaced when gossip "+what, "a")
		}
	}
	verdict(true, "declared %s failed while their connection was healthy")
	verdict(false, "saw %s alive again")

	for _, c := range []struct {
		n    *fedNode
		peer string
		was  LinkInfo
		ups  int
	}{{a, "b", infoA, upsA}, {b, "a", infoB, upsB}} {
		li, _ := c.n.link(c.peer)
		if !li.Connected || !li.Since.Equal(c.was.Since) || li.Reconnects != c.was.Reconnects {
			t.Errorf("%s's link to %s: connected %v since %v (was %v), reconnects %d (was %d): want the same connection throughout",
				c.n.name, c.peer, li.Connected, li.Since, c.was.Since, li.Reconnects, c.was.Reconnects)
		}
		if ups := linkUps(c.n); ups != c.ups {
			t.Errorf("%s's links established %d connections during the flap, want none", c.n.name, ups-c.ups)
		}
	}
	a.publish(t, topic(a, 3), "after")
	b.publish(t, topic(b, 7), "after")
	testlog.WaitFor(t, 20*time.Second, "records published after the flap mirrored", func() bool {
		return b.next(topic(a, 3)) == 2 && a.next(topic(b, 7)) == 2
	})
}

// A peer that gossip declares failed and that really died is dropped: its link, kept
// through the verdict while the connection lived, ends once the liveness watch gives the
// silent connection up (LinkIdleTimeout), and dials nothing; gossip seeing the node alive
// again (restarted on its data) brings a new link, whose mirrors resume from their cursors.
func TestLinkToFailedPeerEndsWithItsConnection(t *testing.T) {
	m := newFedMesh(t)
	a := m.addNode("a", nodeOpts{mirror: []string{"dead.>"}})
	b := m.addNode("b", nodeOpts{})
	b.publish(t, "dead.t", "one")
	testlog.WaitFor(t, 10*time.Second, "mirror up", func() bool { return a.next("dead.t") == 1 })
	la, _ := a.fedNow().linkTo(b.name)

	b.failed.Store(true)
	a.fedNow().PeersChanged()
	if got := waitVerdict(t, a, b, la, true); got != la {
		t.Fatalf("a's link to b was dropped when gossip declared b failed while their connection was healthy")
	}
	b.kill() // still listed (failed), as gossip lists a dead node until it is reaped
	killed := time.Now()
	testlog.WaitFor(t, 20*time.Second, "a's link to the dead b dropped", func() bool {
		l, _ := a.fedNow().linkTo(b.name)
		return l == nil
	})
	took := time.Since(killed)
	if _, ok := a.link("b"); ok {
		t.Fatalf("a still lists a link to b")
	}
	if took > 5*time.Second {
		t.Errorf("a dropped its link to the dead b %v after the kill, want about LinkIdleTimeout (2 s)", took)
	}
	t.Logf("a dropped its link to the dead b %v after the kill", took.Round(time.Millisecond))

	b.restart()
	b.publish(t, "dead.t", "two")
	b.failed.Store(false)
	a.fedNow().PeersChanged()
	testlog.WaitFor(t, 20*time.Second, "b back: the mirror resumes on a new link", func() bool { return a.next("dead.t") == 2 })
}
