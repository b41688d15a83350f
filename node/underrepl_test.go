package node

import (
	"fmt"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
)

// TestUnderReplicatedGroupsCountedOnLeaders: with one node of three stopped, every data group
// (each has a replica on every node) is under-replicated, counted once over the region, on its
// leader (quicmq_raft_groups_under_replicated); 0 again once the node is back.
func TestUnderReplicatedGroupsCountedOnLeaders(t *testing.T) {
	m := newDrainMesh(t, -1) // no balancer: leaders move only when eu-3 stops
	under := func(names ...string) int {
		sum := 0
		for _, name := range names {
			sum += int(metricWith(t, m.nodes[name], "quicmq_raft_groups_under_replicated", nil))
		}
		return sum
	}
	all := []string{"eu-1", "eu-2", "eu-3"}
	testlog.WaitFor(t, 15*time.Second, "no group under-replicated", func() bool { return under(all...) == 0 })
	groups := len(m.nodes["eu-1"].rep.localGroups())
	if err := m.nodes["eu-3"].Close(); err != nil {
		t.Fatal(err)
	}
	testlog.WaitFor(t, 30*time.Second, fmt.Sprintf("the %d data groups under-replicated, each counted once", groups), func() bool {
		return under("eu-1", "eu-2") == groups
	})
	m.restart("eu-3")
	testlog.WaitFor(t, 30*time.Second, "no group under-replicated once eu-3 is back", func() bool { return under(all...) == 0 })
}
