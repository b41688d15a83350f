package node

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/testlog"
)

// TestFirstPublishRacesExplicitPlacement: with RaftSettings.PredictPlacement, first
// publishes relayed to the leader of the
// group their node predicts (replpredict.go) race an explicit `topics create --replicas 2`
// of the same topics from another node, at seeded offsets in time. Whichever placement
// wins, every topic's acknowledged records are on its replicas and only there, at dense
// offsets in the order they were published, identical on each: a prediction that lost (the
// topic went to a group of two replicas) was passed on, never appended to the group the
// publish was predicted for. QUICMQ_SEED repeats a schedule.
func TestFirstPublishRacesExplicitPlacement(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("QUICMQ_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (QUICMQ_SEED)", seed)
	rng := rand.New(rand.NewPCG(seed, 29))
	m := newRegionMesh(t, []string{"eu"}, 3, func(c *Config) {
		c.Replicas = 3
		c.Raft = TestRaftSettings()
		c.Raft.GroupsPerNode = 2
		c.Raft.PredictPlacement = true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	conns := map[string]*client.Conn{}
	for _, name := range m.names {
		conns[name] = m.dial(name)
		defer conns[name].Close()
	}
	// Groups of three replicas are declared and led before the race, so that the first
	// publishes below are predicted; the groups of two are declared by the first create.
	publishTopics(ctx, t, conns["eu-1"], "warm", 30)
	for _, name := range m.names {
		r := m.nodes[name].rep
		testlog.WaitFor(t, 15*time.Second, "a leader for every group on "+name, func() bool {
			for _, g := range r.localGroups() {
				if ro, _ := r.d.Role(g.id); ro.Lead == 0 {
					return false
				}
			}
			return true
		})
	}
	predicted0 := predictedSum(m)

	const topics, records = 60, 5
	type race struct {
		topic, pub, admin string
		delay             time.Duration // of the create after the first publish (or before: negative)
	}
	races := make([]race, topics)
	for i := range races {
		races[i] = race{topic: fmt.Sprintf("race.%d", i), pub: m.names[rng.IntN(3)], admin: m.names[rng.IntN(3)],
			delay: time.Duration(rng.IntN(6000)-2000) * time.Microsecond}
	}
	var wg sync.WaitGroup
	created := make([]error, topics)
	futs := make([][]*client.Future, topics)
	for i, rc := range races {
		wg.Go(func() {
			if rc.delay > 0 {
				// A jitter of the schedule, not a wait for an outcome: the checks below wait
				// for what they look at.
				time.Sleep(rc.delay)
			}
			_, created[i] = conns[rc.admin].CreateTopic(ctx, rc.topic, client.TopicOptions{Replicas: 2})
		})
		if rc.delay < 0 {
			time.Sleep(-rc.delay / 4)
		}
		for j := range records {
			f, err := conns[rc.pub].PublishAsync(ctx, client.Message{Topic: rc.topic, Payload: []byte(strconv.Itoa(j))})
			if err != nil {
				t.Fatal(err)
			}
			futs[i] = append(futs[i], f)
		}
	}
	for i, fs := range futs {
		for j, f := range fs {
			if _, err := f.Wait(ctx); err != nil {
				t.Fatalf("%s: publish %d (from %s): %v", races[i].topic, j, races[i].pub, err)
			}
		}
	}
	wg.Wait()
	byCount := map[int]int{}
	for i, rc := range races {
		held := checkPlacedOnly(t, m, rc.topic, records)
		byCount[len(held)]++
		if len(held) == 3 && created[i] == nil {
			t.Errorf("%s: placed on 3 replicas, yet its create with 2 was answered without an error", rc.topic)
		}
		if len(held) == 2 && created[i] != nil {
			t.Errorf("%s: placed on 2 replicas as created, yet the create failed: %v", rc.topic, created[i])
		}
	}
	t.Logf("topics by replica count %v; %d first publishes relayed before their placement was read", byCount, predictedSum(m)-predicted0)
	if predictedSum(m) == predicted0 {
		t.Errorf("no first publish was relayed before its placement: the race was not run")
	}
}

func predictedSum(m *regionMesh) int64 {
	var s int64
	for _, n := range m.all() {
		s += n.rep.predicted.Load()
	}
	return s
}

// checkPlacedOnly checks that topic's records (want, payloads "0", "1", ...) are identical
// on the nodes its placement names and that no other node holds any; it returns the names.
func checkPlacedOnly(t *testing.T, m *regionMesh, topic string, want int) []string {
	t.Helper()
	var held []string
	testlog.WaitFor(t, 15*time.Second, "the placement of "+topic+" on every node", func() bool {
		for _, n := range m.all() {
			if n.rep.lookup(topic) == nil {
				return false
			}
		}
		held = m.nodes["eu-1"].rep.lookup(topic).names()
		return true
	})
	var on []*Node
	for _, name := range m.names {
		n := m.nodes[name]
		if !slices.Contains(held, name) {
			if _, next, ok := n.Log().Bounds(topic); ok && next > 0 {
				t.Errorf("%s: %s holds %d records of %q, which is placed on %v only", topic, name, next, topic, held)
			}
			continue
		}
		on = append(on, n)
	}
	recs := checkIdentical(t, on, topic, want)
	for i, r := range recs {
		if string(r.Payload) != strconv.Itoa(i) {
			t.Errorf("%s: offset %d holds %q, want %q: out of publish order", topic, i, r.Payload, strconv.Itoa(i))
		}
	}
	return held
}
