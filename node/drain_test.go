package node

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/node/relocate"
)

// newDrainMesh starts a replicated region of three nodes with the admin API, whose raft
// groups (six, two first-placed on each node) hold topics already.
func newDrainMesh(t *testing.T, balance time.Duration, mod ...func(*Config)) *regionMesh {
	m := newRegionMesh(t, []string{"eu"}, 3, func(c *Config) {
		c.Replicas = 3
		c.AdminAPI = true
		c.Raft = TestRaftSettings()
		c.Raft.GroupsPerNode = 4
		c.Raft.BalanceInterval = balance
		for _, f := range mod {
			f(c)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := m.dial("eu-1")
	defer c.Close()
	publishEach(ctx, t, c, "d", 60)
	want := groupsWanted(4, 3, 3)
	for _, name := range m.names {
		r := m.nodes[name].rep
		testlog.WaitFor(t, 15*time.Second, fmt.Sprintf("%d groups with leaders on %s", want, name), func() bool {
			gs := r.localGroups()
			if len(gs) != want {
				return false
			}
			for _, g := range gs {
				if ro, _ := r.d.Role(g.id); ro.Lead == 0 {
					return false
				}
			}
			return true
		})
	}
	return m
}

// leads counts, on every running node, the groups (the metadata group included) it leads.
func (m *regionMesh) leads() map[string]int {
	out := map[string]int{}
	for _, name := range m.names {
		if n := m.nodes[name]; n != nil {
			out[name] = len(n.rep.reloc.LedGroups())
		}
	}
	return out
}

// allLed reports whether every group of via's has a leader, none of them node.
func (m *regionMesh) allLedBut(via, node string) bool {
	r := m.nodes[via].rep
	id := m.nodes[node].rep.id
	for _, g := range append([]uint64{metaGroup}, groupIDs(r.localGroups())...) {
		ro, ok := r.d.Role(g)
		if !ok || ro.Lead == 0 || ro.Lead == id {
			return false
		}
	}
	return true
}

// publishEach publishes one record to each of count topics, retrying each until it is
// acknowledged (a balancer may move a leader under it: the publish is then refused, never
// appended).
func publishEach(ctx context.Context, t *testing.T, c *client.Conn, prefix string, count int) {
	t.Helper()
	for i := range count {
		topic := fmt.Sprintf("%s.%d", prefix, i)
		var errs []string
		for {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := c.Publish(pctx, client.Message{Topic: topic, Payload: []byte("x"), ProducerID: "p", Sequence: 1})
			cancel()
			if err == nil {
				break
			}
			if errs = append(errs, err.Error()); ctx.Err() != nil {
				t.Fatalf("publish to %s: %v (%d attempts: %v)", topic, err, len(errs), errs[:min(len(errs), 5)])
			}
		}
	}
}

func groupIDs(gs []*repGroup) []uint64 {
	out := make([]uint64, len(gs))
	for i, g := range gs {
		out[i] = g.id
	}
	return out
}

// loadGen publishes to topics, each topic's records one at a time in order, each retried
// (same producer and sequence) until acknowledged, counting refusals.
type loadGen struct {
	acked   []atomic.Uint64
	refused atomic.Uint64
	stop    context.CancelFunc
	wg      sync.WaitGroup
	errs    chan error
}

func startLoad(t *testing.T, c *client.Conn, topics int) *loadGen {
	return startLoadTimed(t, c, topics, nil)
}

// startLoadTimed is startLoad that also reports each acknowledged publish to acked (when
// not nil): when it was sent, and how long its acknowledgement took (refusals retried
// included).
func startLoadTimed(t *testing.T, c *client.Conn, topics int, acked func(sent time.Time, took time.Duration)) *loadGen {
	ctx, cancel := context.WithCancel(context.Background())
	g := &loadGen{acked: make([]atomic.Uint64, topics), stop: cancel, errs: make(chan error, topics)}
	for i := range topics {
		g.wg.Go(func() {
			topic := fmt.Sprintf("load.%d", i)
			for seq := uint64(1); ; seq++ {
				m := client.Message{Topic: topic, Payload: []byte(strconv.FormatUint(seq-1, 10)), ProducerID: "load-" + topic, Sequence: seq}
				sent := time.Now()
				for {
					pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Second)
					_, err := c.Publish(pctx, m)
					pcancel()
					if err == nil {
						break
					}
					if ctx.Err() != nil {
						return
					}
					// A publish stream that ends (its node's leader moved and answered
					// nothing for a while) refuses every topic's publish in flight once.
					if g.refused.Add(1) > uint64(max(200, 20*topics)) {
						g.errs <- fmt.Errorf("%s: too many refusals, last: %w", topic, err)
						return
					}
				}
				if acked != nil {
					acked(sent, time.Since(sent))
				}
				g.acked[i].Store(seq)
				if ctx.Err() != nil {
					return
				}
			}
		})
	}
	t.Cleanup(func() { cancel(); g.wg.Wait() })
	return g
}

func (g *loadGen) total() uint64 {
	var s uint64
	for i := range g.acked {
		s += g.acked[i].Load()
	}
	return s
}

// waitMore waits until n more publishes were acknowledged.
func (g *loadGen) waitMore(t *testing.T, n uint64, cond func() bool) {
	t.Helper()
	from := g.total()
	testlog.WaitFor(t, 30*time.Second, fmt.Sprintf("%d more publishes acknowledged", n), func() bool {
		select {
		case err := <-g.errs:
			t.Fatal(err)
		default:
		}
		if cond != nil && !cond() {
			t.Fatalf("the condition failed while publishing")
		}
		return g.total() >= from+n
	})
}

// check stops the load and verifies every topic's log: the acknowledged records, in order,
// at dense offsets, once, identical on every replica.
func (g *loadGen) check(t *testing.T, m *regionMesh) {
	t.Helper()
	g.stop()
	g.wg.Wait()
	for i := range g.acked {
		topic := fmt.Sprintf("load.%d", i)
		acked := g.acked[i].Load()
		// The last publish may have been stored without its ack arriving before the stop;
		// eu-1, a follower now, may trail the leader's ack by a round.
		var next uint64
		testlog.WaitFor(t, 10*time.Second, fmt.Sprintf("%s: eu-1 to apply the %d records acknowledged", topic, acked), func() bool {
			_, next, _ = m.nodes["eu-1"].Log().Bounds(topic)
			return next >= acked
		})
		if next != acked && next != acked+1 {
			t.Fatalf("%s: %d records stored, %d acknowledged", topic, next, acked)
		}
		recs := checkIdentical(t, m.all(), topic, int(next))
		for off, r := range recs {
			if string(r.Payload) != strconv.Itoa(off) {
				t.Fatalf("%s: offset %d holds %q: lost, duplicated or reordered", topic, off, r.Payload)
			}
		}
	}
}

// TestDrainMovesLeadershipsOffUnderLoad: a drained node hands every leadership (the
// metadata group's and every data group's) to the other replicas and takes none while
// publishing goes on; nothing acknowledged is lost or duplicated; once undrained it leads
// again (the balancer gives it its share).
func TestDrainMovesLeadershipsOffUnderLoad(t *testing.T) {
	m := newDrainMesh(t, 200*time.Millisecond)
	c := dialNode(t, m.nodes["eu-3"], client.Options{})
	defer c.Close()
	load := startLoad(t, c, 8)
	load.waitMore(t, 200, nil)
	testlog.WaitFor(t, 20*time.Second, "eu-1 to lead some groups (balanced)", func() bool { return m.leads()["eu-1"] > 0 })

	if code, body := m.post("eu-3", "/v1/nodes/eu-1/drain"); code != http.StatusOK {
		t.Fatalf("drain: %d %s", code, body)
	}
	testlog.WaitFor(t, 20*time.Second, "eu-1 drained and leading nothing", func() bool {
		return m.nodes["eu-1"].rep.reloc.Drained("eu-1") && m.leads()["eu-1"] == 0 && m.allLedBut("eu-2", "eu-1")
	})
	// It stays off while publishing goes on and the balancer runs.
	load.waitMore(t, 400, func() bool { return m.leads()["eu-1"] == 0 })
	for _, ni := range m.nodeInfos("eu-2") {
		if ni.Name == "eu-1" && (ni.State != "draining" || ni.Led != 0 || ni.MetaLeader) {
			t.Fatalf("eu-1 as listed: %+v", ni)
		}
	}

	if code, body := m.post("eu-2", "/v1/nodes/eu-1/undrain"); code != http.StatusOK {
		t.Fatalf("undrain: %d %s", code, body)
	}
	testlog.WaitFor(t, 30*time.Second, "eu-1 undrained and leading again", func() bool {
		return !m.nodes["eu-1"].rep.reloc.Drained("eu-1") && m.leads()["eu-1"] > 0
	})
	load.waitMore(t, 200, nil)
	load.check(t, m)
	t.Logf("publishes acknowledged %d, refused and retried %d", load.total(), load.refused.Load())
}

// TestDrainSurvivesRestart: the drain is region state: the drained node restarted reads it
// from the metadata and leads nothing, also the groups it wins an election in.
func TestDrainSurvivesRestart(t *testing.T) {
	m := newDrainMesh(t, 200*time.Millisecond)
	if code, body := m.post("eu-1", "/v1/nodes/eu-2/drain"); code != http.StatusOK {
		t.Fatalf("drain: %d %s", code, body)
	}
	testlog.WaitFor(t, 20*time.Second, "eu-2 drained and leading nothing", func() bool {
		return m.nodes["eu-2"].rep.reloc.Drained("eu-2") && m.leads()["eu-2"] == 0
	})
	if err := m.nodes["eu-2"].Close(); err != nil {
		t.Fatal(err)
	}
	m.restart("eu-2")
	r := m.nodes["eu-2"].rep
	testlog.WaitFor(t, 20*time.Second, "the restarted eu-2 to read that it is drained", func() bool { return r.reloc.Drained("eu-2") })
	c := m.dial("eu-2")
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	publishEach(ctx, t, c, "after", 30)
	testlog.WaitFor(t, 20*time.Second, "every group led, none by eu-2", func() bool { return m.allLedBut("eu-2", "eu-2") })
	for _, ni := range m.nodeInfos("eu-2") {
		if ni.Name == "eu-2" && ni.State != "draining" {
			t.Fatalf("eu-2 as listed after its restart: %+v", ni)
		}
	}
	if code, body := m.post("eu-2", "/v1/nodes/eu-2/undrain"); code != http.StatusOK {
		t.Fatalf("undrain: %d %s", code, body)
	}
	testlog.WaitFor(t, 30*time.Second, "eu-2 leading again", func() bool { return m.leads()["eu-2"] > 0 })
}

// TestBalancerEvensLeadersAndDrainRefusals: with two nodes drained every leadership is on
// the third; a drain of it is refused, saying why; undrained, the balancer spreads the
// leaders within one of even.
func TestBalancerEvensLeadersAndDrainRefusals(t *testing.T) {
	m := newDrainMesh(t, 100*time.Millisecond)
	for _, name := range []string{"eu-2", "eu-3"} {
		if code, body := m.post("eu-1", "/v1/nodes/"+name+"/drain"); code != http.StatusOK {
			t.Fatalf("drain %s: %d %s", name, code, body)
		}
	}
	want := groupsWanted(4, 3, 3)
	testlog.WaitFor(t, 20*time.Second, "eu-1 leading every group", func() bool { return m.leads()["eu-1"] == want+1 })
	code, body := m.post("eu-2", "/v1/nodes/eu-1/drain")
	if code != http.StatusConflict || !strings.Contains(body, "no other replica that is up and not drained could lead") {
		t.Fatalf("drain of the last undrained node: %d %s", code, body)
	}
	if code, body := m.post("eu-2", "/v1/nodes/nosuch/drain"); code != http.StatusNotFound {
		t.Fatalf("drain of an unknown node: %d %s", code, body)
	}
	for _, name := range []string{"eu-2", "eu-3"} {
		if code, body := m.post("eu-3", "/v1/nodes/"+name+"/undrain"); code != http.StatusOK {
			t.Fatalf("undrain %s: %d %s", name, code, body)
		}
	}
	testlog.WaitFor(t, 60*time.Second, "data group leaders within one of even", func() bool {
		lo, hi := want, 0
		for _, ni := range m.nodeInfos("eu-1") {
			lo, hi = min(lo, ni.Led), max(hi, ni.Led)
		}
		return hi-lo <= 1
	})
	infos := m.nodeInfos("eu-3")
	if len(infos) != 3 {
		t.Fatalf("nodes: %+v", infos)
	}
	for _, ni := range infos {
		if ni.Role != "voter" || ni.State != "up" || ni.Held != want || ni.Moves == nil {
			t.Errorf("%+v", ni)
		}
	}
	t.Logf("nodes after balancing: %v", infos)
}

// TestStopHandsLeadershipsOff: a graceful stop hands the node's leaderships to the other
// replicas before it closes: when Close returns, the node had stepped down from every
// group, and the others lead them all.
func TestStopHandsLeadershipsOff(t *testing.T) {
	m := newDrainMesh(t, 100*time.Millisecond, func(c *Config) { c.Raft.StopHandOff = 10 * time.Second })
	testlog.WaitFor(t, 20*time.Second, "eu-1 to lead some groups (balanced)", func() bool { return m.leads()["eu-1"] > 0 })
	n := m.nodes["eu-1"]
	before := len(n.rep.reloc.LedGroups())
	start := time.Now()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if left := n.rep.reloc.LedGroups(); len(left) != 0 {
		t.Fatalf("eu-1 stopped still leading groups %v (it led %d)", left, before)
	}
	closed := time.Since(start)
	testlog.WaitFor(t, 20*time.Second, "eu-2 to see every group led by eu-2 or eu-3", func() bool { return m.allLedBut("eu-2", "eu-1") })
	t.Logf("eu-1 handed off %d leaderships and stopped in %v; eu-2 saw new leaders %v after", before, closed, time.Since(start))
}

// TestDrainWaitsForEveryNodeToReadIt: while a node of the region does not announce that it
// reads drain records (an older build), a drain is refused, naming it.
func TestDrainWaitsForEveryNodeToReadIt(t *testing.T) {
	m := newRegionMesh(t, []string{"eu"}, 3, func(c *Config) {
		c.Replicas, c.AdminAPI, c.Raft = 3, true, TestRaftSettings()
		c.noFeatures = c.Name == "eu-3"
	})
	testlog.WaitFor(t, 20*time.Second, "the metadata group formed on eu-1", func() bool {
		ro, _ := m.nodes["eu-1"].rep.d.Role(metaGroup)
		return ro.Lead != 0 && len(m.nodeInfos("eu-1")) == 3
	})
	code, body := m.post("eu-1", "/v1/nodes/eu-2/drain")
	if code != http.StatusConflict || !strings.Contains(body, "eu-3 (meta=2)") {
		t.Fatalf("drain with an older node in the region: %d %s", code, body)
	}
}

// TestDrainThenUndrainFromTwoNodes: a drain asked at one node and an undrain asked at
// another right after end undrained, without the earlier request, still announced in
// gossip for a moment, draining the node again.
func TestDrainThenUndrainFromTwoNodes(t *testing.T) {
	m := newDrainMesh(t, -1)
	lead := ""
	for _, ni := range m.nodeInfos("eu-1") {
		if ni.MetaLeader {
			lead = ni.Name
		}
	}
	var askers []string // two nodes that do not lead the metadata: their requests go by gossip
	for _, name := range m.names {
		if name != lead {
			askers = append(askers, name)
		}
	}
	if code, body := m.post(askers[0], "/v1/nodes/"+lead+"/drain"); code != http.StatusOK {
		t.Fatalf("drain: %d %s", code, body)
	}
	if code, body := m.post(askers[1], "/v1/nodes/"+lead+"/undrain"); code != http.StatusOK {
		t.Fatalf("undrain: %d %s", code, body)
	}
	testlog.WaitFor(t, 20*time.Second, "both requests settled: neither asker announces one", func() bool {
		for _, a := range askers {
			if pending, _ := m.nodes[a].rep.reloc.DrainRequests(); pending > 0 {
				return false
			}
			for _, name := range m.names { // and every node's gossip shows the tag cleared
				for _, mem := range m.nodes[name].Gossip().RegionMembers("eu") {
					if mem.Name == a && mem.Tags[relocate.TagDrainReq] != "" {
						return false
					}
				}
			}
		}
		return true
	})
	for _, name := range m.names {
		rl := m.nodes[name].rep.reloc
		testlog.WaitFor(t, 10*time.Second, name+" to read the undrain", func() bool { return !rl.Drained(lead) })
		_, changes := rl.DrainRequests()
		if changes > 2 {
			t.Errorf("%s applied %d drain state changes of %s, want at most 2 (drain, undrain)", name, changes, lead)
		}
	}
}

// TestDrainedNodeHandsOnWhatItWins: a drained node given a leadership (here by its group's
// leader transferring it there, as an election it wins would) hands it on again.
func TestDrainedNodeHandsOnWhatItWins(t *testing.T) {
	m := newDrainMesh(t, -1)
	if code, body := m.post("eu-1", "/v1/nodes/eu-2/drain"); code != http.StatusOK {
		t.Fatalf("drain: %d %s", code, body)
	}
	r2 := m.nodes["eu-2"].rep
	testlog.WaitFor(t, 20*time.Second, "eu-2 drained and leading nothing", func() bool {
		return r2.reloc.Drained("eu-2") && m.leads()["eu-2"] == 0
	})
	g := r2.localGroups()[0].id
	lead := ""
	for _, name := range m.names {
		if ro, _ := m.nodes[name].rep.d.Role(g); ro.Leader {
			lead = name
		}
	}
	before := metricWith(t, m.nodes["eu-2"], "quicmq_raft_leadership_transfers_total", map[string]string{"reason": "drain"})
	if err := m.nodes[lead].rep.d.TransferLeadership(context.Background(), g, r2.id); err != nil {
		t.Fatal(err)
	}
	testlog.WaitFor(t, 20*time.Second, "eu-2 to hand on the leadership it was given", func() bool {
		return metricWith(t, m.nodes["eu-2"], "quicmq_raft_leadership_transfers_total", map[string]string{"reason": "drain"}) > before && m.allLedBut("eu-1", "eu-2")
	})
}
