package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/testlog"
)

func TestGroupsRecordRoundTrip(t *testing.T) {
	rec := &groupsRecord{
		groups: []*repGroup{
			{id: 2, many: true, label: "g2", replicas: []repMember{{"eu-1", 11}, {"eu-2", 12}, {"eu-3", 13}}, boot: []uint64{11, 12, 13}},
			{id: 3, many: true, label: "g3", replicas: []repMember{{"eu-2", 12}}, boot: []uint64{12}},
		},
		topics: []groupPlacement{{"orders.eu.1", 2}, {"telemetry.device.42", 3}},
	}
	got, err := decodeGroups(encodeGroups(rec))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rec) {
		t.Fatalf("decoded %+v, want %+v", got, rec)
	}
	b := encodeGroups(rec)
	for i := range len(b) {
		if _, err := decodeGroups(b[:i]); err == nil {
			t.Errorf("a groups record cut to %d of its %d bytes decoded", i, len(b))
		}
	}
	if _, err := decodeGroups(append(b, 0)); err == nil {
		t.Error("a groups record with a trailing byte decoded")
	}
	if _, err := decodeGroups(encodeGroups(&groupsRecord{topics: []groupPlacement{{"x", metaGroup}}})); err == nil {
		t.Error("a placement on the metadata group decoded")
	}
}

// Decoding a groups record allocates per record, not per topic (issue 29): every node
// decodes each record that places thousands of new topics, and each topic's name and
// uvarints were allocated apart (3 allocations a topic before).
func TestDecodeGroupsAllocatesPerRecord(t *testing.T) {
	rec := &groupsRecord{groups: []*repGroup{
		{id: 2, many: true, label: "g2", replicas: []repMember{{"eu-1", 11}, {"eu-2", 12}, {"eu-3", 13}}, boot: []uint64{11, 12, 13}},
	}}
	const topics = 4096
	for i := range topics {
		rec.topics = append(rec.topics, groupPlacement{fmt.Sprintf("orders.eu.%d", i), 2 + uint64(i%2)*300})
	}
	b := encodeGroups(rec)
	allocs := testing.AllocsPerRun(20, func() {
		if _, err := decodeGroups(b); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 16 {
		t.Errorf("decoding a groups record of %d topics allocates %.0f times, want at most 16", topics, allocs)
	}
	got, err := decodeGroups(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rec) {
		t.Fatal("the record did not decode to what was encoded")
	}
}

// FuzzGroupsRecord: a groups record comes from raft entries: any bytes decode to an error
// or to a record that encodes back to the same bytes.
func FuzzGroupsRecord(f *testing.F) {
	f.Add(encodeGroups(&groupsRecord{
		groups: []*repGroup{{id: 2, replicas: []repMember{{"a", 1}, {"b", 2}}}},
		topics: []groupPlacement{{"t", 2}},
	}))
	f.Add([]byte{groupsVersion, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := decodeGroups(b)
		if err != nil {
			return
		}
		if again := encodeGroups(rec); string(again) != string(b) {
			t.Fatalf("decoded and encoded again: %x, was %x", again, b)
		}
	})
}

func TestGroupsWanted(t *testing.T) {
	for _, c := range []struct{ perNode, nodes, k, want int }{
		{4, 3, 3, 6}, // 4 groups of 3 on 3 nodes, rounded to 2 led by each
		{4, 5, 3, 10},
		{1, 3, 3, 3},
		{8, 3, 1, 24},
	} {
		if got := groupsWanted(c.perNode, c.nodes, c.k); got != c.want {
			t.Errorf("groupsWanted(%d, %d, %d) = %d, want %d", c.perNode, c.nodes, c.k, got, c.want)
		}
	}
}

// resendingOptions make the SDK publish again, stored once, what a stream that ended left of
// unknown outcome (a leader moving under a loaded machine), for tests that create topics and
// count their records exactly.
var resendingOptions = client.Options{Idempotent: true, Reconnect: true}

// publishTopics publishes one record to each of count topics named prefix.N through c,
// pipelined, publishing again a record refused as unavailable (a leader or metadata leader
// changing under a loaded machine: "no longer leads metadata; retry"). A record whose
// outcome is unknown fails the test: publishing it again might store it twice.
func publishTopics(ctx context.Context, t *testing.T, c *client.Conn, prefix string, count int) {
	t.Helper()
	todo := make([]int, count)
	for i := range todo {
		todo[i] = i
	}
	for attempt := 1; len(todo) > 0; attempt++ {
		futs := make([]*client.Future, len(todo))
		for k, i := range todo {
			f, err := c.PublishAsync(ctx, client.Message{Topic: fmt.Sprintf("%s.%d", prefix, i), Payload: []byte("x")})
			if err != nil {
				t.Fatal(err)
			}
			futs[k] = f
		}
		var again []int
		var first error
		for k, f := range futs {
			_, err := f.Wait(ctx)
			var ce *client.Error
			switch {
			case err == nil:
			case errors.As(err, &ce) && ce.Code == client.CodeUnavailable && !errors.Is(err, client.ErrOutcomeUnknown) && ctx.Err() == nil:
				again = append(again, todo[k])
				first = cmp.Or(first, err)
			default:
				t.Fatalf("publish to %s.%d: %v", prefix, todo[k], err)
			}
		}
		if len(again) > 0 {
			t.Logf("publishTopics %s: attempt %d: %d of %d refused as unavailable, publishing them again; first: %v", prefix, attempt, len(again), len(todo), first)
		}
		todo = again
	}
}

// TestManyTopicsShareFewGroups: a replicated region places its topics on a set of raft
// groups sized by the region, not by the topics; every topic's record is on every replica,
// and the groups' preferred leaders are spread over the nodes.
func TestManyTopicsShareFewGroups(t *testing.T) {
	m := newRegionMesh(t, []string{"eu"}, 3, func(c *Config) {
		c.Replicas = 3
		c.Raft = TestRaftSettings()
		c.Raft.GroupsPerNode = 2
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := dialNode(t, m.nodes["eu-2"], resendingOptions)
	defer c.Close()
	const topics = 300
	publishTopics(ctx, t, c, "many", topics)
	want := groupsWanted(2, 3, 3)
	for _, name := range m.names {
		n := m.nodes[name]
		testlog.WaitFor(t, 15*time.Second, "every topic's record on "+name, func() bool {
			for i := range topics {
				if _, next, ok := n.Log().Bounds(fmt.Sprintf("many.%d", i)); !ok || next != 1 {
					return false
				}
			}
			return true
		})
		n.rep.pl.RLock()
		groups, placed := len(n.rep.pl.groups), len(n.rep.pl.topics)
		n.rep.pl.RUnlock()
		if groups != want || placed != topics {
			t.Errorf("%s: %d groups and %d topics placed, want %d groups and %d topics", name, groups, placed, want, topics)
		}
		n.rep.mu.Lock()
		read := n.rep.mu.read
		n.rep.mu.Unlock()
		t.Logf("%s: %d topics in %d groups through %d metadata records", name, placed, groups, read)
	}
	// Each group's first replica stands first, and the first replicas spread over the nodes
	// (which node ends up leading is raft's: leaders are not balanced yet).
	first := map[string]int{}
	for _, g := range m.nodes["eu-1"].rep.localGroups() {
		first[g.replicas[0].name]++
	}
	if len(first) != 3 {
		t.Errorf("groups by first replica: %v, want every node first in some", first)
	}
	testlog.WaitFor(t, 10*time.Second, "a leader for every group", func() bool {
		for _, g := range m.nodes["eu-1"].rep.localGroups() {
			if ro, _ := m.nodes["eu-1"].rep.d.Role(g.id); ro.Lead == 0 {
				return false
			}
		}
		return true
	})
	checkIdentical(t, m.all(), "many.7", 1)
}

// TestOneGroupPerTopicUntilEveryNodeReadsGroups: while a node of the region does not say
// it reads groups records (an older build), the metadata leader places each topic in a
// group of its own, as that build does; the setting's negative value does the same.
func TestOneGroupPerTopicUntilEveryNodeReadsGroups(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(*Config)
	}{
		{"older-node", func(c *Config) {
			if c.Name == "eu-3" {
				c.noFeatures = true
			}
		}},
		{"setting", func(c *Config) { c.Raft.GroupsPerNode = -1 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newRegionMesh(t, []string{"eu"}, 3, func(cfg *Config) {
				cfg.Replicas = 3
				cfg.Raft = TestRaftSettings()
				c.mod(cfg)
			})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			conn := m.dial("eu-1")
			defer conn.Close()
			const topics = 5
			publishTopics(ctx, t, conn, "own", topics)
			for _, name := range m.names {
				r := m.nodes[name].rep
				testlog.WaitFor(t, 15*time.Second, "every topic placed on "+name, func() bool {
					r.pl.RLock()
					defer r.pl.RUnlock()
					return len(r.pl.topics) == topics
				})
				r.pl.RLock()
				for topic, g := range r.pl.topics {
					if g != topicGroup(topic) || r.pl.groups[g].many {
						t.Errorf("%s: %q in group %d, want its own group %d", name, topic, g, topicGroup(topic))
					}
				}
				r.pl.RUnlock()
			}
			checkIdentical(t, m.all(), "own.3", 1)
		})
	}
}

// TestUpgradeToGroupsOneNodeAtATime: a region written by a build that gives each topic a
// group of its own (no features announced) is upgraded one node at a time: its topics keep
// their groups and records, topics created while an old node remains get groups of their
// own too, and once every node announces groups, new topics share the region's groups.
func TestUpgradeToGroupsOneNodeAtATime(t *testing.T) {
	m := newRegionMesh(t, []string{"eu"}, 3, func(c *Config) {
		c.Replicas = 3
		c.Raft = TestRaftSettings()
		c.Raft.GroupsPerNode = -1
		c.noFeatures = true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	publish := func(via, prefix string, count int) {
		t.Helper()
		c := m.dial(via)
		defer c.Close()
		for i := range count {
			publishRetrying(ctx, t, c, fmt.Sprintf("%s.%d", prefix, i), 0, 2)
		}
	}
	ownGroups := func(prefix string, count int) {
		t.Helper()
		for _, n := range m.all() {
			for i := range count {
				topic := fmt.Sprintf("%s.%d", prefix, i)
				testlog.WaitFor(t, 15*time.Second, topic+" placed on "+n.Name(), func() bool { return n.rep.lookup(topic) != nil })
				if g := n.rep.lookup(topic).group; g != topicGroup(topic) {
					t.Errorf("%s: %q in group %d, want a group of its own", n.Name(), topic, g)
				}
			}
		}
	}
	publish("eu-1", "old", 3)
	ownGroups("old", 3)
	for i, name := range m.names {
		if err := m.nodes[name].Close(); err != nil {
			t.Fatal(err)
		}
		cfg := m.cfgs[name]
		cfg.Raft.GroupsPerNode, cfg.noFeatures = 0, false
		m.cfgs[name] = cfg
		m.restart(name)
		if i < len(m.names)-1 {
			prefix := fmt.Sprintf("mid%d", i)
			publish(name, prefix, 2)
			ownGroups(prefix, 2) // an older node remains
		}
	}
	for _, n := range m.all() {
		testlog.WaitFor(t, 15*time.Second, "every node announcing groups, seen from "+n.Name(), n.rep.manyGroups)
	}
	publish("eu-2", "new", 10)
	for _, n := range m.all() {
		for i := range 10 {
			topic := fmt.Sprintf("new.%d", i)
			testlog.WaitFor(t, 15*time.Second, topic+" placed on "+n.Name(), func() bool { return n.rep.lookup(topic) != nil })
			n.rep.pl.RLock()
			g := n.rep.pl.groups[n.rep.pl.topics[topic]]
			n.rep.pl.RUnlock()
			if !g.many {
				t.Errorf("%s: %q in a group of its own after the upgrade", n.Name(), topic)
			}
		}
	}
	c := m.dial("eu-3")
	defer c.Close()
	for i := range 3 { // records 2 and 3 of each old topic, in its old group
		publishRetrying(ctx, t, c, fmt.Sprintf("old.%d", i), 2, 4)
	}
	for i := range 3 {
		checkIdenticalFrom(t, m.all(), fmt.Sprintf("old.%d", i), 0, 4)
	}
	checkIdentical(t, m.all(), "new.4", 2)
}

// The metadata leader's batched asks wait for their topics on one channel, closed by the
// next placement, not on a channel and a waiting entry per topic (placeAll; issue 29:
// those were made and dropped for every creation asked of the leader).
func TestPlacementChangedIsOneChannelForEveryTopic(t *testing.T) {
	r := &replicated{n: &Node{}}
	r.n.cfg.Replicas = 1
	r.pl.topics = map[string]uint64{}
	g := &repGroup{id: 7, replicas: []repMember{{name: "a"}}}
	const n = 1000
	chans := map[<-chan struct{}]bool{}
	for i := range n {
		ch := r.placementChanged(fmt.Sprintf("wait.%d", i))
		if ch == nil {
			t.Fatalf("wait.%d: placed before any placement", i)
		}
		chans[ch] = true
	}
	if len(chans) != 1 || len(r.pl.waiting) != 0 {
		t.Fatalf("%d channels and %d waiting entries for %d topics, want one channel and none", len(chans), len(r.pl.waiting), n)
	}
	var ch <-chan struct{}
	for c := range chans {
		ch = c
	}
	r.pl.Lock()
	r.placeLocked("wait.3", g)
	r.pl.Unlock()
	select {
	case <-ch:
	default:
		t.Fatal("a placement did not close the channel its waiters wait on")
	}
	if r.placementChanged("wait.3") != nil {
		t.Error("a placed topic still waits")
	}
	if next := r.placementChanged("wait.4"); next == nil || next == ch {
		t.Error("after a placement, an unplaced topic waits on a new channel")
	}
}
