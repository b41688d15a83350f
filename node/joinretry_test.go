package node

import (
	"net"
	"testing"
	"time"

	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/testlog"
)

// unusedAddr returns a 127.0.0.1 address whose port nothing holds now (TCP and UDP: serf uses
// both), for a node started later.
func unusedAddr(t *testing.T) string {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		if u, err := net.ListenPacket("udp", addr); err == nil {
			u.Close()
			return addr
		}
	}
	t.Fatal("no port free for both TCP and UDP")
	return ""
}

// TestJoinRetriesUntilAPeerAnswers: a node whose WAN join names only a node not started yet
// (the first region of a deployment) joins the WAN pool once that node is up, without a
// restart: before, it logged "will be joined by others" and stayed alone unless the later
// node happened to name it, so a replicated region's nodes that nobody named never linked
// to the other regions and mirrored nothing into them.
func TestJoinRetriesUntilAPeerAnswers(t *testing.T) {
	later := unusedAddr(t)
	a := startNode(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Name: "eu-1", Region: "eu", Logger: testLogger(t),
		GossipLAN: "127.0.0.1:0", GossipWAN: "127.0.0.1:0", GossipProfile: gossip.ProfileTest, WANJoin: []string{later}})
	// b names nobody: only a's retry can bring the two together.
	b := startNode(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Name: "us-1", Region: "us", Logger: testLogger(t),
		GossipLAN: "127.0.0.1:0", GossipWAN: later, GossipProfile: gossip.ProfileTest})
	testlog.WaitFor(t, 20*time.Second, "eu-1 and us-1 to see each other in the WAN pool", func() bool {
		return len(a.Gossip().RegionMembers("us")) == 1 && len(b.Gossip().RegionMembers("eu")) == 1
	})
}
