package replica

import (
	"context"
	"fmt"
	"testing"
)

// TestDriverTransferLeadership: a quiet group's leader hands its leadership to a follower
// that is caught up, which then takes proposals with the offsets going on; asked of a
// follower, the request reaches the leader (raft forwards it) and moves leadership as well.
func TestDriverTransferLeadership(t *testing.T) {
	rs, _ := startRegion(t, 3, []uint64{1})
	l := leaderOf(t, rs, 1)
	proposeAll(t, rs, 1, 5, "a")
	waitFor(t, "the group to quiesce", func() bool {
		s, _ := l.d.Stats(context.Background())
		return s.Quiesced == 1
	})
	var to, third *testReplica
	for _, r := range rs {
		if r != l && to == nil {
			to = r
		} else if r != l {
			third = r
		}
	}
	if err := l.d.TransferLeadership(context.Background(), 1, to.id); err != nil {
		t.Fatal(err)
	}
	waitFor(t, fmt.Sprintf("node %d to lead after the transfer", to.id), func() bool {
		ro, _ := to.d.Role(1)
		return ro.Leader
	})
	res := proposeAll(t, rs, 1, 5, "b")
	for _, x := range res {
		if x.Offset < 5 || x.Offset >= 10 {
			t.Fatalf("offset %d after the transfer, want 5..9", x.Offset)
		}
	}
	// Asked of a follower (third), the transfer back to the old leader is forwarded.
	waitFor(t, "the follower to know the new leader", func() bool {
		ro, _ := third.d.Role(1)
		return ro.Lead == to.id
	})
	if err := third.d.TransferLeadership(context.Background(), 1, l.id); err != nil {
		t.Fatal(err)
	}
	waitFor(t, fmt.Sprintf("node %d to lead again", l.id), func() bool {
		ro, _ := l.d.Role(1)
		return ro.Leader
	})
	if err := l.d.TransferLeadership(context.Background(), 9, to.id); err == nil {
		t.Fatal("a transfer in an unknown group was taken")
	}
}
