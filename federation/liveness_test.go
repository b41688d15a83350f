package federation

import (
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
)

// With the default LinkIdleTimeout (2 s), a link whose peer died without a word (no
// CONNECTION_CLOSE, no stateless reset: killed, or cut off) gives the connection up within
// about 2 s of the peer's last packet, where QUIC's idle timeout used to hold it for 30 s.
func TestLinkNoticesSilentPeerByDefault(t *testing.T) {
	m := newFedMesh(t)
	a := m.addNode("a", nodeOpts{mirror: []string{"live.>"}})
	b := m.addNode("b", nodeOpts{})
	b.publish(t, "live.t", "one")
	testlog.WaitFor(t, 10*time.Second, "mirror up", func() bool { return a.next("live.t") > 0 })
	b.kill()
	killed := time.Now()
	testlog.WaitFor(t, 20*time.Second, "the link gives up the dead peer's connection", func() bool {
		li, _ := a.link("b")
		return li.IdleTimeouts > 0
	})
	took := time.Since(killed)
	if took > 3500*time.Millisecond {
		t.Fatalf("the link noticed its dead peer after %v, want within about 2 s", took)
	}
	t.Logf("the link noticed its dead peer after %v", took.Round(time.Millisecond))
}
