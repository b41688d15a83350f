package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/node/manage"
	"github.com/quicmq/quicmq/node/relocate"
)

// newMoveMesh is a replicated region of size nodes with --replicas 3 and the admin API,
// whose groups hold topics and have leaders.
// releaseMoveEnds lets every node record the end of the moves it held back (holdEnds) and
// waits until each has applied it: no move in progress anywhere.
func (m *regionMesh) releaseMoveEnds() {
	m.t.Helper()
	for _, name := range m.names {
		m.nodes[name].rep.reloc.HoldMoveEnds(false)
	}
	for _, name := range m.names {
		rr := m.nodes[name].rep
		testlog.WaitForErr(m.t, 60*time.Second, name+" to apply the move's end", func() error {
			if len(rr.reloc.Moves()) == 0 {
				return nil
			}
			return fmt.Errorf("moves %v", rr.reloc.Moves())
		})
	}
}

func newMoveMesh(t *testing.T, size int, mod ...func(*Config)) *regionMesh {
	m := newRegionMesh(t, []string{"eu"}, size, func(c *Config) {
		c.Replicas = 3
		c.AdminAPI = true
		c.Raft = TestRaftSettings()
		c.Raft.GroupsPerNode = 2
		for _, f := range mod {
			f(c)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	c := m.dial("eu-3")
	defer c.Close()
	publishEach(ctx, t, c, "d", 40)
	want := groupsWanted(2, size, 3)
	testlog.WaitFor(t, 60*time.Second, fmt.Sprintf("%d groups, each with a leader", want), func() bool {
		r := m.nodes["eu-3"].rep
		r.pl.RLock()
		n := len(r.pl.groups)
		r.pl.RUnlock()
		if n != want {
			return false
		}
		for _, name := range m.names {
			for _, g := range m.nodes[name].rep.localGroups() {
				if ro, _ := m.nodes[name].rep.d.Role(g.id); ro.Lead == 0 {
					return false
				}
			}
		}
		return true
	})
	return m
}

// waitRemoved waits until via no longer lists name, logging the progress it shows.
func (m *regionMesh) waitRemoved(via, name string, timeout time.Duration) {
	m.t.Helper()
	last := ""
	start := time.Now()
	testlog.WaitFor(m.t, timeout, name+" removed", func() bool {
		for _, ni := range m.nodeInfos(via) {
			if ni.Name == name {
				if s := ni.String(); s != last {
					m.t.Logf("%v %s", time.Since(start).Round(time.Millisecond), s)
					last = s
				}
				return false
			}
		}
		return true
	})
	m.t.Logf("%s removed in %v", name, time.Since(start).Round(time.Millisecond))
}

// checkFullyReplicated checks, on the stayers, that every group is placed on three of them
// and that its leader's raft configuration is exactly that placement (three voters, no
// learner, no joint configuration).
func (m *regionMesh) checkFullyReplicated(stayers []string) {
	m.t.Helper()
	why := ""
	defer func() {
		if m.t.Failed() {
			m.t.Logf("last seen: %s", why)
		}
	}()
	testlog.WaitFor(m.t, 60*time.Second, "every group placed on three stayers, its raft configuration matching", func() bool {
		r := m.nodes[stayers[0]].rep
		r.pl.RLock()
		groups := make([]*repGroup, 0, len(r.pl.groups))
		for _, g := range r.pl.groups {
			groups = append(groups, g)
		}
		r.pl.RUnlock()
		for _, g := range groups {
			var ids []uint64
			for _, rm := range g.replicas {
				if !slices.Contains(stayers, rm.name) {
					why = fmt.Sprintf("group %s placed on %v", g.label, g.names())
					return false
				}
				ids = append(ids, m.nodes[rm.name].rep.id)
			}
			slices.Sort(ids)
			if len(ids) != 3 {
				m.t.Fatalf("group %s placed on %v", g.label, g.names())
			}
			led := false
			for _, rm := range g.replicas {
				rr := m.nodes[rm.name].rep
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				mb, err := rr.d.Membership(ctx, g.id)
				cancel()
				if err != nil || mb.Match == nil {
					continue
				}
				led = true
				if !reflect.DeepEqual(mb.Voters, ids) || len(mb.Learners) > 0 || mb.Joint() {
					why = fmt.Sprintf("group %s placed on %v %v, its leader %s has voters %v learners %v outgoing %v", g.label, g.names(), ids, rm.name, mb.Voters, mb.Learners, mb.Outgoing)
					return false
				}
			}
			if !led {
				why = fmt.Sprintf("group %s placed on %v: no leader among them", g.label, g.names())
				return false
			}
		}
		return true
	})
}

// checkLoad stops the load and verifies every topic on every stayer holding it: the
// acknowledged records, at dense offsets, once each, identical on every replica.
func checkLoad(t *testing.T, g *loadGen, m *regionMesh, stayers []string) {
	t.Helper()
	g.stop()
	g.wg.Wait()
	r := m.nodes[stayers[0]].rep
	for i := range g.acked {
		topic := fmt.Sprintf("load.%d", i)
		acked := g.acked[i].Load()
		tp := r.lookup(topic)
		if tp == nil {
			t.Fatalf("%s not placed", topic)
		}
		var holders []*Node
		for _, rm := range tp.replicas {
			holders = append(holders, m.nodes[rm.name])
		}
		var next uint64
		testlog.WaitFor(t, 10*time.Second, fmt.Sprintf("%s: %s to apply the %d records acknowledged", topic, holders[0].Name(), acked), func() bool {
			_, next, _ = holders[0].Log().Bounds(topic)
			return next >= acked
		})
		if next != acked && next != acked+1 {
			t.Fatalf("%s: %d records stored, %d acknowledged", topic, next, acked)
		}
		recs := checkIdentical(t, holders, topic, int(next))
		for off, rec := range recs {
			if string(rec.Payload) != strconv.Itoa(off) {
				t.Fatalf("%s: offset %d holds %q: lost, duplicated or reordered", topic, off, rec.Payload)
			}
		}
	}
}

// watchMoves samples, every few milliseconds until stopped, the configuration of every
// group with a move in progress on its leader, and fails the test when a move's new replica
// votes, with the old one removed, while it trails the commit index by more than twice the
// lag a promotion allows in five samples running, or when the leader that promoted it did so
// knowing a match of 0 or one further behind than that lag (moves.mu.promoted): the old
// replica was removed before its replacement caught up. (The promotion used to be judged by
// any leader's match of 0 while it knew the replica a learner in its term; that failed on
// base when a leader elected while the promotion was in flight sampled the new voter
// before the replica had answered it: a fresh leader knows no match.)
func watchMoves(t *testing.T, m *regionMesh) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan []string, 1)
	t.Cleanup(cancel)
	nodes := m.all()
	go func() {
		var bad []string
		behind := map[[2]uint64]int{} // (node's raft ID, group) -> bad samples running
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		promotions := func() {
			for _, n := range nodes {
				r := n.rep
				for g, p := range r.reloc.TakePromotions() {
					if (p[0] == 0 || p[0]+rejoinMaxLag < p[1]) && len(bad) < 10 {
						bad = append(bad, fmt.Sprintf("group %d: %s promoted a new replica (removing the old one) knowing it had %d of %d entries",
							g, n.Name(), p[0], p[1]))
					}
				}
			}
		}
		for ctx.Err() == nil {
			promotions()
			for _, n := range nodes {
				r := n.rep
				for g, gm := range r.reloc.Moves() {
					if ro, ok := r.d.Role(g); !ok || !ro.Leader {
						continue
					}
					mctx, mcancel := context.WithTimeout(ctx, time.Second)
					mb, err := r.d.Membership(mctx, g)
					mcancel()
					if err != nil || mb.Match == nil {
						continue
					}
					key := [2]uint64{r.id, g}
					match := mb.Match[gm.ToID]
					if mb.IsVoter(gm.ToID) && !mb.IsVoter(gm.FromID) && match+2*rejoinMaxLag < mb.Status.GetCommit() {
						behind[key]++
					} else {
						behind[key] = 0
					}
					if behind[key] == 5 && len(bad) < 10 {
						bad = append(bad, fmt.Sprintf("group %d: %s's replica removed while the one on %s has %d of %d entries",
							g, gm.From, gm.To, mb.Match[gm.ToID], mb.Status.GetCommit()))
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
		promotions() // those since the last sample
		done <- bad
	}()
	return func() {
		cancel()
		if bad := <-done; len(bad) > 0 {
			t.Fatalf("a move removed a replica before its replacement caught up:\n%s", strings.Join(bad, "\n"))
		}
	}
}

// TestRemoveTwoNodesUnderLoad: a region of five with three replicas loses two nodes through
// 'nodes remove' while topics take publishes: every replica of theirs moves to a stayer
// (learner, caught up, promoted with the old one removed), the two leave the metadata
// group, every acknowledged record is on every replica once at its offset, and a third
// removal is refused (the region would keep fewer nodes than its replicas).
func TestRemoveTwoNodesUnderLoad(t *testing.T) {
	m := newMoveMesh(t, 5)
	c := dialNode(t, m.nodes["eu-3"], client.Options{})
	defer c.Close()
	load := startLoad(t, c, 8)
	load.waitMore(t, 200, nil)

	stopWatch := watchMoves(t, m)
	// eu-1 formed the region (a metadata voter), eu-5 joined it later (a learner).
	for _, name := range []string{"eu-1", "eu-5"} {
		if code, body := m.post("eu-3", "/v1/nodes/"+name+"/remove"); code != http.StatusOK {
			t.Fatalf("remove %s: %d %s", name, code, body)
		}
	}
	testlog.WaitFor(t, 30*time.Second, "both removals recorded", func() bool {
		_, ok1 := m.nodes["eu-2"].rep.reloc.Removing("eu-1")
		_, ok5 := m.nodes["eu-2"].rep.reloc.Removing("eu-5")
		return ok1 && ok5
	})
	if code, body := m.post("eu-2", "/v1/nodes/eu-4/remove"); code != http.StatusConflict {
		t.Fatalf("a third removal: %d %s, want a refusal", code, body)
	} else {
		t.Logf("third removal refused: %s", body)
	}
	m.waitRemoved("eu-3", "eu-1", 180*time.Second)
	m.waitRemoved("eu-3", "eu-5", 180*time.Second)
	stopWatch()
	stayers := []string{"eu-2", "eu-3", "eu-4"}
	m.checkFullyReplicated(stayers)
	mb, err := m.nodes["eu-3"].rep.d.Membership(context.Background(), metaGroup)
	if err != nil || len(mb.Voters) != 3 || len(mb.Learners) != 0 {
		t.Fatalf("metadata group: %+v %v", mb, err)
	}
	load.waitMore(t, 200, nil)
	checkLoad(t, load, m, stayers)
	t.Logf("publishes acknowledged %d, refused and retried %d", load.total(), load.refused.Load())
}

// TestRemoveDeadNode: a node stopped for good with its data deleted is refused a plain
// removal (it cannot hand its replicas over) and removed with --dead: its groups are
// re-replicated from the survivors and the region is back to three replicas of every group,
// nothing acknowledged lost.
func TestRemoveDeadNode(t *testing.T) {
	m := newMoveMesh(t, 4)
	c := dialNode(t, m.nodes["eu-3"], client.Options{})
	defer c.Close()
	load := startLoad(t, c, 8)
	load.waitMore(t, 200, nil)

	if err := m.nodes["eu-2"].Close(); err != nil {
		t.Logf("close eu-2: %v", err)
	}
	if err := os.RemoveAll(m.cfgs["eu-2"].DataDir); err != nil {
		t.Fatal(err)
	}
	testlog.WaitFor(t, 60*time.Second, "eu-2 seen down", func() bool {
		for _, ni := range m.nodeInfos("eu-3") {
			if ni.Name == "eu-2" {
				return ni.State == "down"
			}
		}
		return false
	})
	if code, body := m.post("eu-3", "/v1/nodes/eu-2/remove"); code == http.StatusOK || !strings.Contains(body, "--dead") {
		t.Fatalf("remove of a down node without --dead: %d %s, want a refusal", code, body)
	} else {
		t.Logf("refused: %s", body)
	}
	if code, body := m.post("eu-4", "/v1/nodes/eu-3/remove?dead=1"); code == http.StatusOK {
		t.Fatalf("remove --dead of an up node: %d %s, want a refusal", code, body)
	} else {
		t.Logf("refused: %s", body)
	}
	if code, body := m.post("eu-4", "/v1/nodes/eu-2/remove?dead=1"); code != http.StatusOK {
		t.Fatalf("remove --dead: %d %s", code, body)
	}
	m.waitRemoved("eu-3", "eu-2", 180*time.Second)
	stayers := []string{"eu-1", "eu-3", "eu-4"}
	m.checkFullyReplicated(stayers)
	testlog.WaitFor(t, 60*time.Second, "no group under-replicated (quicmq_raft_groups_under_replicated 0 on every stayer)", func() bool {
		sum := 0
		for _, name := range stayers {
			sum += int(metricWith(t, m.nodes[name], "quicmq_raft_groups_under_replicated", nil))
		}
		return sum == 0
	})
	load.waitMore(t, 200, nil)
	checkLoad(t, load, m, stayers)
	var ns []manage.NodeInfo
	b, _ := json.Marshal(m.nodeInfos("eu-1"))
	_ = json.Unmarshal(b, &ns)
	for _, ni := range ns {
		if ni.Name == "eu-2" || ni.State != "up" || ni.Held == 0 {
			t.Fatalf("after the removal: %+v", ns)
		}
	}
	t.Logf("publishes acknowledged %d, refused and retried %d", load.total(), load.refused.Load())
}

// TestRemoveResumesAfterMetadataLeaderRestart: the metadata leader is stopped while a move
// it planned is in progress and started again on its data: the moves are metadata records,
// so the next leader (or it) carries the removal to its end, nothing acknowledged lost.
func TestRemoveResumesAfterMetadataLeaderRestart(t *testing.T) {
	m := newMoveMesh(t, 4)
	lead := m.metaLeader()
	victim := "eu-4"
	if lead == victim {
		victim = "eu-3"
	}
	via := ""
	for _, name := range m.names {
		if name != lead && name != victim && via == "" {
			via = name
		}
	}
	t.Logf("metadata leader %s; removing %s; asking and publishing through %s", lead, victim, via)
	c := dialNode(t, m.nodes[via], client.Options{})
	defer c.Close()
	load := startLoad(t, c, 8)
	load.waitMore(t, 200, nil)
	if code, body := m.post(via, "/v1/nodes/"+victim+"/remove"); code != http.StatusOK {
		t.Fatalf("remove %s: %d %s", victim, code, body)
	}
	testlog.WaitFor(t, 30*time.Second, "a move in progress", func() bool { return len(m.nodes[lead].rep.reloc.Moves()) > 0 })
	t.Logf("moves in progress when %s stops: %v", lead, m.nodes[lead].rep.reloc.Moves())
	if err := m.nodes[lead].Close(); err != nil {
		t.Logf("close %s: %v", lead, err)
	}
	m.restart(lead)
	m.waitRemoved(via, victim, 180*time.Second)
	var stayers []string
	for _, name := range m.names {
		if name != victim {
			stayers = append(stayers, name)
		}
	}
	m.checkFullyReplicated(stayers)
	load.waitMore(t, 200, nil)
	checkLoad(t, load, m, stayers)
	t.Logf("publishes acknowledged %d, refused and retried %d", load.total(), load.refused.Load())
}

// metaLeader waits for a node of m to lead the region's metadata group and names it.
func (m *regionMesh) metaLeader() string {
	m.t.Helper()
	lead := ""
	testlog.WaitFor(m.t, 20*time.Second, "a metadata leader", func() bool {
		for _, name := range m.names {
			if ro, ok := m.nodes[name].rep.d.Role(metaGroup); ok && ro.Leader {
				lead = name
			}
		}
		return lead != ""
	})
	return lead
}

// moveDestination picks, from the metadata leader lead's placement, a destination for a
// move: the first node other than lead and eu-1 (started with no one to join), and the
// lowest group it holds no replica of.
func (m *regionMesh) moveDestination(lead string) (dest string, g *repGroup) {
	m.t.Helper()
	r := m.nodes[lead].rep
	for _, name := range m.names[1:] {
		if name == lead || dest != "" {
			continue
		}
		r.pl.RLock()
		for _, cand := range r.pl.groups {
			if !slices.Contains(cand.names(), name) && (g == nil || cand.id < g.id) {
				g, dest = cand, name
			}
		}
		r.pl.RUnlock()
	}
	if g == nil {
		m.t.Fatalf("no group that a node other than %s and eu-1 lacks", lead)
	}
	return dest, g
}

// TestMoveUndoneWhenDestinationDies: a move's new replica's node stops just as the move
// starts (the start record names it while gossip still sees it up): its learner can never
// catch up, so the metadata leader undoes the move once gossip sees the node down. The
// group's leader takes the learner out, the move ends undone (log line,
// quicmq_raft_moves_undone_total), the group stays on its old replicas with exactly them
// as voters, and nothing acknowledged is lost; the node started again takes no part in the
// group.
func TestMoveUndoneWhenDestinationDies(t *testing.T) {
	m := newMoveMesh(t, 4, func(c *Config) { c.Raft.DisableReplicaBalance = true })
	lead := m.metaLeader()
	dest, g := m.moveDestination(lead)
	r := m.nodes[lead].rep
	via := lead
	c := dialNode(t, m.nodes[via], client.Options{})
	defer c.Close()
	load := startLoad(t, c, 8)
	load.waitMore(t, 200, nil)
	from := g.replicas[0]
	destID := m.nodes[dest].rep.id
	t.Logf("metadata leader %s; moving group %s's replica on %s to %s (raft ID %d), which stops at once; placement %v", lead, g.label, from.name, dest, destID, g.names())

	if err := m.nodes[dest].Close(); err != nil {
		t.Logf("close %s: %v", dest, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !r.reloc.StartMove(ctx, relocate.Move{Group: g.id, From: from.name, FromID: from.id, To: dest, ToID: destID}) {
		t.Fatal("the start record was not committed")
	}
	testlog.WaitForErr(t, 60*time.Second, "the move undone", func() error {
		if metricWith(t, m.nodes[lead], "quicmq_raft_moves_undone_total", nil) >= 1 && len(r.reloc.Moves()) == 0 {
			return nil
		}
		return fmt.Errorf("moves %v, %s listed as %v", r.reloc.Moves(), dest, m.nodeInfos(via))
	})
	// Every running node applied the undone record; the placement never changed.
	for _, name := range m.names {
		if name == dest {
			continue
		}
		rr := m.nodes[name].rep
		testlog.WaitFor(t, 10*time.Second, name+" to apply the undone record", func() bool {
			return metricWith(t, m.nodes[name], "quicmq_raft_moves_undone_total", nil) == 1 && len(rr.reloc.Moves()) == 0
		})
		rr.pl.RLock()
		names := rr.pl.groups[g.id].names()
		rr.pl.RUnlock()
		if !slices.Equal(names, g.names()) {
			t.Fatalf("%s places group %s on %v after the undo, want %v", name, g.label, names, g.names())
		}
	}
	var stayers []string
	for _, name := range m.names {
		if name != dest {
			stayers = append(stayers, name)
		}
	}
	load.waitMore(t, 200, nil)
	m.restart(dest)
	stayers = append(stayers, dest)
	m.checkFullyReplicated(stayers) // voters exactly the placement: the learner is gone
	if done := metricWith(t, m.nodes[lead], "quicmq_raft_moves_done_total", nil); done != 0 {
		t.Fatalf("%v moves done, want 0", done)
	}
	load.waitMore(t, 200, nil)
	checkLoad(t, load, m, stayers)
	t.Logf("publishes acknowledged %d, refused and retried %d", load.total(), load.refused.Load())
}

// TestMoveUndoAfterPromotionIsRecordedDone: an undo record that the metadata applies only
// after raft promoted the move's new replica (its node was seen down just after the
// promotion, say) does not take the new voter out: the group's leader sees TO voting and
// FROM gone (undoStep), and the move is recorded done, the placement naming TO, the group's
// voters exactly its placement, nothing acknowledged lost. The metadata leader's recording of
// the move's end is held (mover.holdEnds) until the undo record is applied, so the undo is
// ordered after the promotion.
func TestMoveUndoAfterPromotionIsRecordedDone(t *testing.T) {
	m := newMoveMesh(t, 4, func(c *Config) { c.Raft.DisableReplicaBalance = true })
	for _, name := range m.names {
		m.nodes[name].rep.reloc.HoldMoveEnds(true)
	}
	lead := m.metaLeader()
	dest, g := m.moveDestination(lead)
	r := m.nodes[lead].rep
	c := dialNode(t, m.nodes[lead], client.Options{})
	defer c.Close()
	load := startLoad(t, c, 8)
	load.waitMore(t, 200, nil)
	from := g.replicas[0]
	destID := m.nodes[dest].rep.id
	t.Logf("metadata leader %s; moving group %s's replica on %s to %s (raft ID %d); placement %v", lead, g.label, from.name, dest, destID, g.names())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if !r.reloc.StartMove(ctx, relocate.Move{Group: g.id, From: from.name, FromID: from.id, To: dest, ToID: destID}) {
		t.Fatal("the start record was not committed")
	}
	testlog.WaitForErr(t, 60*time.Second, "raft to promote "+dest+" and remove "+from.name, func() error {
		for _, name := range m.names {
			rr := m.nodes[name].rep
			if ro, ok := rr.d.Role(g.id); !ok || !ro.Leader {
				continue
			}
			mem, err := rr.d.Membership(ctx, g.id)
			if err != nil {
				return err
			}
			if !mem.Joint() && mem.IsVoter(destID) && !mem.IsVoter(from.id) && !mem.IsLearner(from.id) {
				return nil
			}
			return fmt.Errorf("%s leads with voters %v, learners %v, joint %v", name, mem.Voters, mem.Learners, mem.Joint())
		}
		return errors.New("no leader")
	})
	if _, ok := r.reloc.Moves()[g.id]; !ok {
		t.Fatal("the move ended while the recording of its end was held")
	}
	if !r.reloc.UndoMove(ctx, relocate.Move{Group: g.id, From: from.name, To: dest, ToID: destID}) {
		t.Fatal("the undo record was not committed")
	}
	for _, name := range m.names {
		rr := m.nodes[name].rep
		testlog.WaitFor(t, 10*time.Second, name+" to apply the undo record", func() bool {
			gm, ok := rr.reloc.Moves()[g.id]
			return ok && gm.Undo
		})
	}
	m.releaseMoveEnds()
	for _, name := range m.names {
		rr := m.nodes[name].rep
		if done, undone := metricWith(t, m.nodes[name], "quicmq_raft_moves_done_total", nil), metricWith(t, m.nodes[name], "quicmq_raft_moves_undone_total", nil); done != 1 || undone != 0 {
			t.Fatalf("%s: %v moves done and %v undone, want 1 and 0", name, done, undone)
		}
		rr.pl.RLock()
		names := rr.pl.groups[g.id].names()
		rr.pl.RUnlock()
		if !slices.Contains(names, dest) || slices.Contains(names, from.name) {
			t.Fatalf("%s places group %s on %v after the move, want %s instead of %s", name, g.label, names, dest, from.name)
		}
	}
	m.checkFullyReplicated(m.names) // voters exactly the placement: the new voter stayed
	load.waitMore(t, 200, nil)
	checkLoad(t, load, m, m.names)
	t.Logf("publishes acknowledged %d, refused and retried %d", load.total(), load.refused.Load())
}
