package node

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/testlog"
)

// TestScaleTopicCreation measures, on demand (QUICMQ_SCALE_TOPICS=N), how fast a region
// takes N new topics, each created by its first publish from one pipelined SDK client, and
// what the topics cost once idle: a single node and a replicated region of three (Replicas
// 3) side by side in one run, so the ratio is the figure (docs/benchmarks.md). The nodes
// share this process: CPU is the process's, over an idle window, for all of its nodes.
//
//	QUICMQ_SCALE_TOPICS=10000 go test ./node -run TestScaleTopicCreation -v -timeout 20m
func TestScaleTopicCreation(t *testing.T) {
	count, _ := strconv.Atoi(os.Getenv("QUICMQ_SCALE_TOPICS"))
	if count <= 0 {
		t.Skip("on demand: QUICMQ_SCALE_TOPICS=N (topics to create)")
	}
	single := func(t *testing.T) []*Node { return []*Node{newTestNode(t)} }
	region := func(t *testing.T) []*Node {
		// The default raft and gossip timers, as a region runs: the tests' fast ones
		// (elections after 200 ms, probes every 400 ms) are for fault tests.
		m := newRegionMesh(t, []string{"eu"}, 3, func(c *Config) { c.Replicas, c.GossipProfile = 3, gossip.ProfileDefault })
		return []*Node{m.nodes["eu-1"], m.nodes["eu-2"], m.nodes["eu-3"]}
	}
	// The same region relaying each new topic's first publish to its predicted group
	// leader before the placement is read (RaftSettings.PredictPlacement, replpredict.go).
	predicting := func(t *testing.T) []*Node {
		m := newRegionMesh(t, []string{"eu"}, 3, func(c *Config) {
			c.Replicas, c.GossipProfile, c.Raft.PredictPlacement = 3, gossip.ProfileDefault, true
		})
		return []*Node{m.nodes["eu-1"], m.nodes["eu-2"], m.nodes["eu-3"]}
	}
	// The layout before groups held many topics, as the baseline: a group per topic, at
	// most 1,000 topics (it takes minutes beyond).
	perTopic := func(t *testing.T) []*Node {
		m := newRegionMesh(t, []string{"eu"}, 3, func(c *Config) {
			c.Replicas, c.GossipProfile, c.Raft.GroupsPerNode = 3, gossip.ProfileDefault, -1
		})
		return []*Node{m.nodes["eu-1"], m.nodes["eu-2"], m.nodes["eu-3"]}
	}
	for _, c := range []struct {
		name  string
		start func(*testing.T) []*Node
		most  int
	}{{"single", single, count}, {"replicated-3", region, count}, {"replicated-3-predict", predicting, count}, {"replicated-3-group-per-topic", perTopic, min(count, 1000)}} {
		t.Run(c.name, func(t *testing.T) {
			count := c.most
			nodes := c.start(t)
			conn := dialNode(t, nodes[0], client.Options{})
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
			defer cancel()
			start := time.Now()
			// A rolling window of publishes in flight, as a pipelined client keeps.
			const window = 1024
			futs := make([]*client.Future, 0, count)
			waited := 0
			wait := func(upTo int) {
				for ; waited < upTo; waited++ {
					if _, err := futs[waited].Wait(ctx); err != nil {
						t.Fatalf("publish %d: %v", waited, err)
					}
				}
			}
			for i := range count {
				f, err := conn.PublishAsync(ctx, client.Message{Topic: fmt.Sprintf("scale.t%06d", i), Payload: []byte("x")})
				if err != nil {
					t.Fatalf("publish %d: %v", i, err)
				}
				futs = append(futs, f)
				wait(len(futs) - window)
				if (i+1)%(max(count/10, 1)) == 0 {
					t.Logf("%s: %d topics sent, %d acknowledged, %.0f/s", c.name, i+1, waited, float64(waited)/time.Since(start).Seconds())
				}
			}
			wait(len(futs))
			took := time.Since(start)
			if r := nodes[0].rep; r != nil {
				t.Logf("%s: %d first publishes relayed before their placement was read", c.name, r.predicted.Load())
			}
			t.Logf("%s: %d topics created in %v: %.0f topics/s", c.name, count, took.Round(time.Millisecond), float64(count)/took.Seconds())
			for _, n := range nodes {
				testlog.WaitFor(t, 2*time.Minute, "every topic on "+n.Name(), func() bool {
					return len(n.Log().Topics()) >= count
				})
			}
			runtime.GC()
			cpu0, wall0 := cpuTime(), time.Now()
			idle := 10 * time.Second
			if testing.Short() {
				idle = 3 * time.Second
			}
			if path := os.Getenv("QUICMQ_SCALE_HEAP_PROFILE"); path != "" {
				f, err := os.Create(path + "." + c.name)
				if err != nil {
					t.Fatal(err)
				}
				_ = pprof.Lookup("heap").WriteTo(f, 0)
				f.Close()
			}
			if path := os.Getenv("QUICMQ_SCALE_IDLE_PROFILE"); path != "" {
				f, err := os.Create(path + "." + c.name)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					t.Fatal(err)
				}
				defer pprof.StopCPUProfile()
			}
			testlog.Pause(context.Background(), idle) // the measurement window: what the idle topics cost per second
			cores := (cpuTime() - cpu0).Seconds() / time.Since(wall0).Seconds()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			lines := metricsLines(t, nodes[0])
			listed, err := conn.Topics(ctx, "scale.>")
			if err != nil {
				t.Fatalf("listing: %v", err)
			}
			t.Logf("%s: idle: %.1f%% of a core for the process's %d node(s); heap in use %d MiB; /metrics of %s: %d lines; listing: %d topics",
				c.name, cores*100, len(nodes), ms.HeapInuse>>20, nodes[0].Name(), lines, len(listed))
			if len(listed) != count {
				t.Errorf("listing has %d topics, want %d", len(listed), count)
			}
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func metricsLines(t *testing.T, n *Node) int {
	t.Helper()
	srv := httptest.NewServer(n.MetricsHandler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.Count(string(b), "\n")
}
