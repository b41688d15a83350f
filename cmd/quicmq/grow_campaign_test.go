package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/nodeproc"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/internal/timeline"
)

// TestGrowCampaign (issue 30, figure 1, with node processes): a region of three `quicmq
// node` processes (--replicas 3) takes pipelined publishes at a fixed rate into many topics
// through one client; two more processes start and join; the replica balancer moves groups
// onto them and the leader balancer leaderships, until `quicmq nodes --format json` shows
// every node holding and leading within one of even with no move in progress. It reports
// the nodes after, the time it took and publish p99 before and during, then reads every
// topic back from a node: every acknowledged record once, and each topic's next offset the
// same on every replica.
//
// QUICMQ_GROW_CAMPAIGN=1 runs it; QUICMQ_GROW_TOPICS (default 1000) and QUICMQ_GROW_RATE
// (publishes/s, default 1000) size it; QUICMQ_GROW_AFTER_ACKS (default a second's worth) is
// how many publishes after the moves it times (the p99 after); QUICMQ_GROW_BIN runs another build's node processes
// (a base to compare with, in the same conditions); QUICMQ_GROW_TIMELINE=1 adds a timeline
// of the nodes' CPU beside the publishes; QUICMQ_GROW_PROFILE=DIR writes a CPU profile of
// each node over the moves (QUICMQ_GROW_PROFILE_SECONDS, default 6) to DIR/NAME.pprof;
// QUICMQ_GROW_EPISODE=1 lays the moves' worst episode of slow publishes beside each node's
// syncs, rounds, catch-up chunks, Pebble flushes, compactions and stalls and GC pauses, per
// 10 ms (grow_episode_test.go; the nodes run with --pprof, which keeps those events);
// QUICMQ_GROW_DATA=DIR keeps the nodes' data under DIR (e.g. /dev/shm, a tmpfs: syncs then
// cost no disk, which tells the moves' own cost apart from the machine's disk, shared by the
// five nodes and whatever else runs);
// QUICMQ_GROW_LOG_LEVEL=debug logs each raft step (with QUICMQ_NODE_LOGS);
// QUICMQ_GROW_NODE_FLAGS adds flags to every node (a setting to try).
//
// QUICMQ_GROW_CONTROL=1 runs the control: the same region, load and two joining processes,
// with both balancers off, so nothing moves. Its "during" is the first QUICMQ_GROW_CONTROL_ACKS
// publishes (default: six seconds' worth, about as long as the moves take) acknowledged after
// the two joined. Run alternately with the campaign, it says how much of the p99 during the
// moves is the machine's (two more processes starting on its cores) and how much the moves'.
func TestGrowCampaign(t *testing.T) {
	if os.Getenv("QUICMQ_GROW_CAMPAIGN") == "" {
		t.Skip("the grow campaign runs five node processes for about a minute: set QUICMQ_GROW_CAMPAIGN=1")
	}
	envInt := func(name string, def int) int {
		v := os.Getenv(name)
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("%s=%q: want a positive integer", name, v)
		}
		return n
	}
	topics, rate := envInt("QUICMQ_GROW_TOPICS", 1000), envInt("QUICMQ_GROW_RATE", 1000)
	bin := quicmqBinary(t)
	if b := os.Getenv("QUICMQ_GROW_BIN"); b != "" { // another build's nodes, to compare in the same conditions
		bin = b
	}
	var listen, admin, metrics []string
	for range 5 {
		listen, admin, metrics = append(listen, freeAddr(t)), append(admin, freeAddr(t)), append(metrics, freeAddr(t))
	}
	profDir := os.Getenv("QUICMQ_GROW_PROFILE") // a CPU profile of each node over the moves (or the control's window)
	episode := os.Getenv("QUICMQ_GROW_EPISODE") != ""
	r := &nodeproc.Region{T: t, Bin: bin, CADir: t.TempDir(), Name: "rc", Replicas: 3, Options: meshOptions}
	for i := range 3 {
		r.Nodes = append(r.Nodes, &nodeproc.Node{Name: fmt.Sprintf("rc%d", i+1), Data: growDataDir(t), LAN: freeAddr(t)})
	}
	control := os.Getenv("QUICMQ_GROW_CONTROL") != ""
	r.Flags = func(n *nodeproc.Node) []string {
		i := r.Index(n.Name)
		flags := []string{"--listen", listen[i], "--admin", admin[i], "--admin-api", "--replicas", "3", "--raft-balance-interval", "2s"}
		if control {
			flags = append(flags, "--raft-no-replica-balance", "--raft-no-balance")
		}
		if extra := os.Getenv("QUICMQ_GROW_NODE_FLAGS"); extra != "" { // e.g. "--raft-moves 1", to try a setting
			flags = append(flags, strings.Fields(extra)...)
		}
		if profDir != "" || episode {
			flags = append(flags, "--metrics", metrics[i], "--pprof")
		}
		if lvl := os.Getenv("QUICMQ_GROW_LOG_LEVEL"); lvl != "" { // debug: each leadership hand-off, with QUICMQ_NODE_LOGS
			flags = append(flags, "--log-level", lvl)
		}
		return flags
	}
	r.StartAll()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l, wg := startRollLoad(t, ctx, r, listen[:3], topics, rate)
	var sampler procSampler
	cpuTimeline := os.Getenv("QUICMQ_GROW_TIMELINE") != "" // a timeline of the machine beside the publishes
	if cpuTimeline {
		defer sampleRegion(ctx, r, &sampler)()
	}
	var io ioSampler // the disk and page cache every 10 ms, for the episode timeline
	if episode {
		sctx, scancel := context.WithCancel(ctx)
		var swg sync.WaitGroup
		swg.Go(func() { io.run(sctx, regionPids(r)) })
		defer func() { scancel(); swg.Wait() }()
	}
	l.waitAcks(t, 5*rate)

	l.phase.Store("grow")
	var wrote map[string]int64 // every process's writes, for the episode's report
	if episode {
		wrote = writers()
	}
	start := time.Now()
	var profs sync.WaitGroup
	profSeconds := envInt("QUICMQ_GROW_PROFILE_SECONDS", 6)
	for i := range 3 {
		growProfile(t, &profs, profDir, metrics[i], r.Nodes[i].Name, profSeconds)
	}
	l.event("start rc4, rc5")
	for i := 3; i < 5; i++ {
		r.Nodes = append(r.Nodes, &nodeproc.Node{Name: fmt.Sprintf("rc%d", i+1), Data: growDataDir(t), LAN: freeAddr(t)})
		r.Start(i)
	}
	for i := 3; i < 5; i++ {
		r.WaitLinks(r.Nodes[i], len(r.Nodes)-1)
		growProfile(t, &profs, profDir, metrics[i], r.Nodes[i].Name, max(1, profSeconds-1))
	}
	defer profs.Wait()
	var rows []growNodeRow
	if control {
		rows = growControl(t, l, admin[0], envInt("QUICMQ_GROW_CONTROL_ACKS", 6*rate))
	} else {
		rows = growBalanced(t, admin[0], start)
	}
	took := time.Since(start)
	l.event("balanced")
	l.phase.Store("after")
	// After the moves (QUICMQ_GROW_AFTER_ACKS publishes, default a second's worth): five
	// processes sync now where three did before, so on a machine whose disk they share the
	// p99 after says how much of the p99 during is the larger region's and not the moves'.
	l.waitAcks(t, envInt("QUICMQ_GROW_AFTER_ACKS", rate))
	cancel()
	wg.Wait()
	var events map[string][]timeline.Event
	if episode {
		events = fetchTimelines(t, []string{"rc1", "rc2", "rc3", "rc4", "rc5"}, metrics, start.Add(-5*time.Second))
		disk, _ := io.between(start, start.Add(took), nil)
		t.Logf("written to storage during the moves (%v): the disk (KiB written, flushes/ms, in flight, dirty/writeback MiB at the end) %s; %s",
			took.Round(time.Millisecond), disk, topWriters(wrote, writers(), 8))
	}

	before, during := l.latencies("before"), l.latencies("grow")
	p99 := func(s []time.Duration) time.Duration {
		if len(s) == 0 {
			return 0
		}
		return s[min(len(s)-1, len(s)*99/100)].Round(10 * time.Microsecond)
	}
	var table []string
	for _, n := range rows {
		table = append(table, fmt.Sprintf("%s %d/%d", n.Name, n.Held, n.Led))
	}
	what := "grow 3 -> 5 node processes"
	if control {
		what = "control (3 + 2 node processes, nothing moved; \"balanced\": its window ended)"
	}
	after := l.latencies("after")
	t.Logf("%s, %d topics at %d publishes/s: balanced in %v; held/led: %s; publish p99 before %v (%d), during %v (%d), %.1fx; after %v (%d); %d answers refused or of unknown outcome, published again: %s",
		what, topics, rate, took.Round(time.Millisecond), strings.Join(table, ", "), p99(before), len(before), p99(during), len(during),
		float64(p99(during))/float64(max(1, p99(before))), p99(after), len(after), l.refused.Load(), l.refusals())

	// Every acknowledged record once, read from rc1; every topic's next offset the same on
	// each of its replicas.
	rctx, rcancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer rcancel()
	rc, err := client.Dial(rctx, client.Options{CAFile: filepath.Join(r.CADir, "ca.pem")}, listen[0])
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	lost, dup := l.readBack(t, rctx, rc, topics)
	nexts := map[string]map[uint64]bool{} // topic -> next offsets its replicas list
	replicasOf := map[int]string{}        // topic number -> its replicas after, for the slow report
	leaderOf := map[int]string{}          // topic number -> its leader after, for the episode
	listed := 0
	for i := range r.Nodes {
		rows, err := r.Topics(rctx, i, "roll.>")
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range rows {
			if !slices.Contains(row.Replicas, r.Nodes[i].Name) {
				// Not a replica: a node a group's replica moved off keeps the log it had
				// then (and lists it); it answers for the topic no more.
				continue
			}
			if n, err := strconv.Atoi(strings.TrimPrefix(row.Topic, "roll.t")); err == nil {
				replicasOf[n] = strings.Join(slices.Sorted(slices.Values(row.Replicas)), "+")
				leaderOf[n] = row.Leader
			}
			if nexts[row.Topic] == nil {
				nexts[row.Topic] = map[uint64]bool{}
			}
			nexts[row.Topic][row.Next] = true
			listed++
		}
	}
	differ := 0
	for topic, set := range nexts {
		if len(set) > 1 {
			differ++
			if differ <= 5 {
				t.Logf("%s: next offsets %v across the nodes", topic, set)
			}
		}
	}
	if cpuTimeline {
		t.Logf("the moves, every 250 ms (CPU of each process and of the machine, publishes sent then):\n%s",
			sampler.timeline(l, start.Add(-time.Second), start.Add(took), 250*time.Millisecond, 3*p99(before), []string{"rc1", "rc2", "rc3", "rc4", "rc5", "test"}))
	}
	t.Logf("publishes of the moves slower than 3x the p99 before (%v), by when they were sent (from the first start, at %s):\n%s",
		3*p99(before), start.Format("15:04:05.000"), l.growSlowReport(start, 3*p99(before), replicasOf))
	if episode {
		// The publishes that make the p99 during the moves, whether or not over 3x before.
		t.Logf("the moves' worst episode of publishes at their p99 (%v) or slower, beside the nodes' store and raft events:\n%s",
			p99(during), l.episodeTimeline(start, p99(during)-1, events, &io, []string{"rc1", "rc2", "rc3", "rc4", "rc5", "test"}, replicasOf, leaderOf))
	}
	t.Logf("read back %d topics: %d acknowledged records lost, %d stored more than once; %d topics whose next offset differs between their replicas (%d replicas listed)", topics, lost, dup, differ, listed)
	if lost > 0 || dup > 0 || differ > 0 || listed != 3*topics {
		t.Errorf("%d lost, %d duplicated, %d topics with different next offsets", lost, dup, differ)
	}
	if l.gaveUp > 0 {
		t.Errorf("%d publishes never acknowledged", l.gaveUp)
	}
}

// growSlowReport lists the episodes of the grow phase's publishes slower than over (runs of
// them sent less than 300 ms apart, as slowReport): when they were sent from start, how
// many, the slowest, how many were published again after an error, and the replica sets
// (after the moves) of their topics, which name their groups. It says where the moves' p99
// comes from, to be read beside the nodes' logs (QUICMQ_NODE_LOGS).
func (l *rollLoad) growSlowReport(start time.Time, over time.Duration, replicasOf map[int]string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var slow []rollSample
	for _, s := range l.samples {
		if !s.sent.Before(start) && s.lat > over {
			slow = append(slow, s)
		}
	}
	slices.SortFunc(slow, func(a, b rollSample) int { return a.sent.Compare(b.sent) })
	var b strings.Builder
	for _, ep := range slowEpisodes(slow) { // rolling_campaign_test.go
		worst, retried := ep.worst()
		sets := map[string]int{}
		for _, s := range ep {
			sets[replicasOf[s.topic]]++
		}
		// The head of the line: answers on the one publish stream go in order, so the first
		// slow publish is the one whose group stalled; the others waited behind it.
		head := ep[0]
		fmt.Fprintf(&b, "  %6.2fs..%6.2fs sent: %d slow, worst %v, %d published again; client on %s; head roll.t%d (replicas after %s, %v, acknowledged at %.2fs); by replicas after: %v\n",
			ep[0].sent.Sub(start).Seconds(), ep[len(ep)-1].sent.Sub(start).Seconds(), len(ep), worst.Round(time.Millisecond), retried, ep[0].node,
			head.topic, replicasOf[head.topic], head.lat.Round(time.Millisecond), head.sent.Add(head.lat).Sub(start).Seconds(), sets)
	}
	return b.String()
}

// growProfile, with dir set, fetches a CPU profile of secs seconds from the node whose
// metrics listener (with --pprof) is at addr into dir/NAME.pprof, on a goroutine wg waits for.
func growProfile(t *testing.T, wg *sync.WaitGroup, dir, addr, name string, secs int) {
	if dir == "" {
		return
	}
	wg.Go(func() {
		resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs))
		if err != nil {
			t.Errorf("%s: profile: %v", name, err)
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s: %s", resp.Status, body)
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name+".pprof"), body, 0o644)
		}
		if err != nil {
			t.Errorf("%s: profile: %v", name, err)
		}
	})
}

// growBalanced polls `quicmq nodes` until the five nodes hold and lead within one of even with
// no move in progress, logging each change, and returns the nodes as listed then.
func growBalanced(t *testing.T, admin string, start time.Time) []growNodeRow {
	t.Helper()
	var rows []growNodeRow
	last := ""
	var asked time.Time
	testlog.WaitForErr(t, 5*time.Minute, "the region balanced", func() error {
		if time.Since(asked) < 100*time.Millisecond { // a CLI run per look: at most ten a second beside the load measured
			return errors.New(last)
		}
		asked = time.Now()
		code, out, errOut := runCLI(t, "", "nodes", "--admin", admin, "--format", "json")
		if code == 0 && json.Unmarshal([]byte(out), &rows) == nil {
			var held, led []int
			moving := 0
			for _, n := range rows {
				held, led = append(held, n.Held), append(led, n.Led)
				moving += len(n.Moves)
			}
			if s := fmt.Sprint(held, led, moving); s != last {
				t.Logf("%v held %v led %v moves %d", time.Since(start).Round(time.Millisecond), held, led, moving)
				last = s
			}
			if len(rows) == 5 && moving == 0 && slices.Max(held)-slices.Min(held) <= 1 && slices.Max(led)-slices.Min(led) <= 1 {
				return nil
			}
		} else if code != 0 {
			t.Logf("quicmq nodes: exit %d: %s", code, errOut)
		}
		return errors.New(last)
	})
	return rows
}

// growNodeRow is a row of `quicmq nodes --format json`, as the campaign reads it.
type growNodeRow struct {
	Name  string            `json:"name"`
	State string            `json:"state"`
	Held  int               `json:"held"`
	Led   int               `json:"led"`
	Moves []json.RawMessage `json:"moves"`
}

// growControl is the control's "during": once `quicmq nodes` lists the two new nodes up, acks
// more publishes acknowledged, nothing moving. It returns the nodes as listed then.
func growControl(t *testing.T, l *rollLoad, admin string, acks int) []growNodeRow {
	t.Helper()
	var rows []growNodeRow
	testlog.WaitForErr(t, time.Minute, "five nodes up", func() error {
		code, out, errOut := runCLI(t, "", "nodes", "--admin", admin, "--format", "json")
		if code != 0 {
			return fmt.Errorf("quicmq nodes: exit %d: %s", code, errOut)
		}
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			return err
		}
		up := 0
		for _, n := range rows {
			if n.State == "up" {
				up++
			}
		}
		if up < 5 {
			return fmt.Errorf("%d of 5 nodes up: %s", up, out)
		}
		return nil
	})
	l.waitAcks(t, acks)
	return rows
}

// growDataDir is a node's data directory: a test temporary directory, or one under
// QUICMQ_GROW_DATA, removed at the end.
func growDataDir(t *testing.T) string {
	root := os.Getenv("QUICMQ_GROW_DATA")
	if root == "" {
		return t.TempDir()
	}
	dir, err := os.MkdirTemp(root, "quicmq-grow-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
