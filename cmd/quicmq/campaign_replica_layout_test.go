package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/nodeproc"
	"github.com/quicmq/quicmq/internal/testlog"
)

// The replicated campaigns run many topics on each raft group: a region keeps its topics in
// a fixed set of groups (node/replgroups.go), so the campaign pins the set's size with
// --raft-groups-per-node (QUICMQ_REPLICA_GROUPS_PER_NODE, default 4: the default of a
// 2-core machine) and publishes to QUICMQ_REPLICA_TOPICS topics (default 30: five on each
// of the 6 groups a region of three makes). Publishes to every topic of a group then share
// its raft entries, and a fault of a group's leader hits all its topics at once.

// replicaLayout is the campaign's prediction of which group holds each topic.
type replicaLayout struct {
	perNode int     // --raft-groups-per-node given to every node (0: the nodes' default, no prediction)
	groups  int     // groups of 3 replicas the region makes
	of      []int   // topic index -> group index (declaration order)
	members [][]int // group index -> its topics' indexes
}

// groupsFlag returns the --raft-groups-per-node the campaign pins, and the flags to pass; none
// when bin has no such flag (a build before groups held many topics: one group per topic).
func groupsFlag(t *testing.T, bin string) (int, []string) {
	t.Helper()
	perNode := envInt("QUICMQ_REPLICA_GROUPS_PER_NODE", 4)
	if out, _ := exec.Command(bin, "node", "-h").CombinedOutput(); perNode <= 0 || !bytes.Contains(out, []byte("-raft-groups-per-node")) {
		return 0, nil
	}
	return perNode, []string{"--raft-groups-per-node", fmt.Sprint(perNode)}
}

// newReplicaLayout predicts the layout as the metadata leader decides it (groupsWanted and
// topicHash in node/replgroups.go): perNode x nodes replicas, rounded up to a multiple of the
// nodes, in groups of replicas; a topic on the group its name's FNV-64a hash picks among
// them, in declaration order. The prediction is checked against the leaders the nodes report
// (check), so a change of the rule shows up as a failure here rather than as a wrong layout.
func newReplicaLayout(perNode, nodes, replicas int, topics []string) *replicaLayout {
	l := &replicaLayout{perNode: perNode}
	if perNode == 0 {
		return l
	}
	want := (perNode*nodes + replicas - 1) / replicas
	l.groups = (want + nodes - 1) / nodes * nodes
	l.members = make([][]int, l.groups)
	for i, tp := range topics {
		h := fnv.New64a()
		_, _ = h.Write([]byte(tp))
		g := int(h.Sum64() % uint64(l.groups))
		l.of = append(l.of, g)
		l.members[g] = append(l.members[g], i)
	}
	return l
}

// String is the layout for the test log: each group with its topics.
func (l *replicaLayout) String() string {
	if l.perNode == 0 {
		return "the nodes' default groups (no layout predicted)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d raft groups of 3 replicas (--raft-groups-per-node %d), topics per group:", l.groups, l.perNode)
	for g, ms := range l.members {
		fmt.Fprintf(&b, "\n  group %d (%d topics):", g+1, len(ms))
		for _, ti := range ms {
			fmt.Fprintf(&b, " rc.t%d", ti)
		}
	}
	return b.String()
}

// check compares the prediction with the leaders node 0 reports: topics of one group have
// one leader. It retries for up to 10 s while a group's leadership settles; a topic led by
// someone else than the rest of its predicted group then fails the test.
func (l *replicaLayout) check(t *testing.T, r *nodeproc.Region, topics []string) {
	t.Helper()
	if l.perNode == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var leaders map[string]int
	err := testlog.UntilErr(ctx, func() error {
		rows, err := r.Topics(ctx, 0, "rc.>")
		if err != nil {
			return err
		}
		leader := map[string]string{}
		for _, row := range rows {
			leader[row.Topic] = row.Leader
		}
		var bad []string
		leaders = map[string]int{}
		for g, ms := range l.members {
			if len(ms) == 0 {
				continue
			}
			lead := leader[topics[ms[0]]]
			leaders[lead]++
			for _, ti := range ms[1:] {
				if leader[topics[ti]] != lead || lead == "" {
					bad = append(bad, fmt.Sprintf("group %d: %s led by %q, %s by %q", g+1, topics[ms[0]], lead, topics[ti], leader[topics[ti]]))
				}
			}
		}
		if len(bad) == 0 {
			return nil
		}
		return errors.New(strings.Join(bad, "; "))
	})
	if err != nil {
		t.Fatalf("the predicted topic -> group layout does not match the leaders the region reports (node/replgroups.go's rule changed?): %v", err)
	}
	t.Logf("layout confirmed: every predicted group's topics report one leader; groups led per node: %v", leaders)
}

// minPerGroup is the fewest topics a group holds.
func (l *replicaLayout) minPerGroup() int {
	if len(l.members) == 0 {
		return 0
	}
	return len(slices.MinFunc(l.members, func(a, b []int) int { return len(a) - len(b) }))
}
