package replica

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
)

// TestDriverTransferLeadership: a quiet group's leader hands its leadership to a follower
// that is caught up, which then takes proposals with the offsets going on; asked of a
// follower, the request reaches the leader (raft forwards it) and moves leadership as well.
func TestDriverTransferLeadership(t *testing.T) {
	rs, _ := startRegion(t, 3, []uint64{1})
	l := leaderOf(t, rs, 1)
	proposeAll(t, rs, 1, 5, "a")
	testlog.WaitFor(t, 20*time.Second, "the group to quiesce", func() bool {
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
	testlog.WaitFor(t, 20*time.Second, fmt.Sprintf("node %d to lead after the transfer", to.id), func() bool {
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
	testlog.WaitFor(t, 20*time.Second, "the follower to know the new leader", func() bool {
		ro, _ := third.d.Role(1)
		return ro.Lead == to.id
	})
	if err := third.d.TransferLeadership(context.Background(), 1, l.id); err != nil {
		t.Fatal(err)
	}
	testlog.WaitFor(t, 20*time.Second, fmt.Sprintf("node %d to lead again", l.id), func() bool {
		ro, _ := l.d.Role(1)
		return ro.Leader
	})
	if err := l.d.TransferLeadership(context.Background(), 9, to.id); err == nil {
		t.Fatal("a transfer in an unknown group was taken")
	}
}

// TestDriverProposalDuringTransferIsRefused: while a transfer waits for its transferee (down
// here, so the transfer stays pending until raft gives it up), a proposal is refused with
// ErrLeadershipMoving naming the transferee, and nothing of it is appended; once raft gives
// the transfer up, the leader takes proposals again.
func TestDriverProposalDuringTransferIsRefused(t *testing.T) {
	rs, net := startRegion(t, 3, []uint64{1})
	l := leaderOf(t, rs, 1)
	proposeAll(t, rs, 1, 3, "a")
	var down *testReplica
	for _, r := range rs {
		if r != l {
			down = r
			break
		}
	}
	net.mu.Lock()
	net.down[down.id] = true
	net.mu.Unlock()
	proposeAll(t, rs, 1, 3, "b") // the down follower is now behind: the transfer must wait for it
	if err := l.d.TransferLeadership(context.Background(), 1, down.id); err != nil {
		t.Fatal(err)
	}
	if ro, _ := l.d.Role(1); !ro.Leader || !ro.Moving {
		t.Fatalf("role during the transfer: %+v, want leading and moving", ro)
	}
	_, err := l.d.Propose(context.Background(), 1, []byte("c"))
	if !errors.Is(err, ErrLeadershipMoving) || !strings.Contains(err.Error(), fmt.Sprintf("to node %d", down.id)) {
		t.Fatalf("propose during the transfer: %v, want ErrLeadershipMoving naming node %d", err, down.id)
	}
	testlog.WaitFor(t, 20*time.Second, "the leader to give the transfer up and take proposals again", func() bool {
		_, err := l.d.Propose(context.Background(), 1, []byte("d"))
		return err == nil
	})
	if ro, _ := l.d.Role(1); !ro.Leader || ro.Moving {
		t.Fatalf("node %d after the transfer to a down node was given up: %+v, want leading, not moving", l.id, ro)
	}
}
