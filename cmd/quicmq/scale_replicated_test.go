package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
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
)

// TestScaleReplicatedTopics measures figure 1 of issue 29 on real node processes: a region
// of three `quicmq node --replicas 3` processes and, in the same run, one single node. Each
// is given QUICMQ_SCALE_TOPICS topics (default 200, so that CI runs it briefly) by their
// first publish, pipelined from one SDK client (the region's through its first node, which
// relays to each group's leader); the test reports topics/s, then, after QUICMQ_SCALE_SETTLE
// seconds of quiet (default 5), each node's CPU over QUICMQ_SCALE_WINDOW seconds (default 5,
// /proc/PID/stat), its RSS (/proc/PID/status), its /metrics line count, and checks that
// `quicmq topics` run against each lists every topic. The machine's load average is logged
// beside them: on a shared machine the figures move with it.
//
//	QUICMQ_SCALE_TOPICS=100000 QUICMQ_SCALE_SETTLE=30 QUICMQ_SCALE_WINDOW=20 \
//	  go test -run TestScaleReplicatedTopics -v -timeout 60m ./cmd/quicmq
//
// QUICMQ_SCALE_BIN runs another build's quicmq binary as the nodes (the same SDK client);
// QUICMQ_SCALE_NODE_FLAGS adds flags to the region's nodes.
func TestScaleReplicatedTopics(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four node processes")
	}
	t.Parallel()
	n := envInt("QUICMQ_SCALE_TOPICS", 200)
	settle := time.Duration(envInt("QUICMQ_SCALE_SETTLE", 5)) * time.Second
	window := time.Duration(envInt("QUICMQ_SCALE_WINDOW", 5)) * time.Second
	bin := os.Getenv("QUICMQ_SCALE_BIN") // another build's nodes, to compare in the same conditions
	if bin == "" {
		bin = quicmqBinary(t)
	}
	t.Logf("nodes: %s", bin)
	r := newReplicaRegion(t, bin, 3)
	metrics := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
	// QUICMQ_SCALE_PPROF=DIR: the nodes serve pprof, and the test writes each node's CPU
	// profile while it creates the topics (DIR/create-NAME.pprof) and over the idle window
	// (DIR/idle-NAME.pprof), and its heap after that window (DIR/heap-NAME.pprof), for
	// `go tool pprof`; QUICMQ_SCALE_PPROF_CREATE sets the
	// creation profile's seconds (default 5), QUICMQ_SCALE_PPROF_DELAY how far into the
	// creation it starts (default 0).
	profDir := os.Getenv("QUICMQ_SCALE_PPROF")
	var prof []string
	if profDir != "" {
		prof = []string{"--pprof"}
	}
	// QUICMQ_SCALE_NODE_FLAGS: more flags for the region's nodes (--raft-predict-placement).
	more := strings.Fields(os.Getenv("QUICMQ_SCALE_NODE_FLAGS"))
	r.Flags = func(n *nodeproc.Node) []string {
		return append(append([]string{"--metrics", metrics[r.Index(n.Name)]}, prof...), more...)
	}
	r.StartAll()
	soloMetrics := freeAddr(t)
	solo := startMeshProcess(t, bin, "solo1", append([]string{"--data", t.TempDir(), "--region", "solo", "--ca-dir", r.CADir, "--gossip", freeAddr(t), "--metrics", soloMetrics}, prof...)...)
	profile := func(phase string, names, addrs []string, d time.Duration) (wait func()) {
		if profDir == "" {
			return func() {}
		}
		var wg sync.WaitGroup
		delay := time.Duration(envInt("QUICMQ_SCALE_PPROF_DELAY", 0)) * time.Second // into the creation
		if phase != "create" {
			delay = 0
		}
		for i := range names {
			wg.Go(func() {
				testlog.Pause(context.Background(), delay) // the profile starts this far into the phase
				if err := cpuProfile(addrs[i], d, filepath.Join(profDir, phase+"-"+names[i]+".pprof")); err != nil {
					t.Logf("profile of %s: %v", names[i], err)
				}
			})
		}
		return wg.Wait
	}
	t.Logf("load average at the start: %s", loadAvg())

	name := func(i int) string { return fmt.Sprintf("s.t%06d", i) }
	create := func(addr string) time.Duration {
		t.Helper()
		c := dialCA(t, addr, r.CADir)
		ctx := context.Background()
		futures := make(chan *client.Future, 8192)
		var wg sync.WaitGroup
		var failed sync.Once
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range futures {
				if _, err := f.Wait(ctx); err != nil {
					failed.Do(func() { t.Errorf("publish: %v", err) })
				}
			}
		}()
		start := time.Now()
		progress := time.Now()
		for i := range n {
			f, err := c.PublishAsync(ctx, client.Message{Topic: name(i), Payload: []byte("first")})
			if err != nil {
				t.Fatalf("publish %s: %v", name(i), err)
			}
			futures <- f
			if time.Since(progress) > 10*time.Second {
				progress = time.Now()
				t.Logf("  %s: %d of %d topics sent after %v", addr, i+1, n, time.Since(start).Round(time.Second))
			}
		}
		close(futures)
		wg.Wait()
		return time.Since(start)
	}
	// QUICMQ_SCALE_PROBE=N: before the bulk creation, N topics are created one at a time
	// and N publishes go to topics that exist, one at a time, on the region and on the
	// single node: the latency of one creation, which bounds the pipelined client's rate
	// (its window over the latency).
	if probe := envInt("QUICMQ_SCALE_PROBE", 0); probe > 0 {
		for _, p := range []struct{ name, addr string }{{"region", r.Nodes[0].Proc().Addr}, {"single", solo.Addr}} {
			c := dialCA(t, p.addr, r.CADir)
			// The region's first creation also declares its raft groups and elects their
			// leaders: timed apart, so that it does not weigh on the average.
			first := time.Now()
			if _, err := c.Publish(context.Background(), client.Message{Topic: "probe.first", Payload: []byte("first")}); err != nil {
				t.Fatalf("probe: %v", err)
			}
			firstTook := time.Since(first)
			created := make([]time.Duration, 0, probe)
			existing := make([]time.Duration, 0, probe)
			for i := range probe {
				start := time.Now()
				if _, err := c.Publish(context.Background(), client.Message{Topic: fmt.Sprintf("probe.t%d", i), Payload: []byte("first")}); err != nil {
					t.Fatalf("probe: %v", err)
				}
				created = append(created, time.Since(start))
				start = time.Now()
				if _, err := c.Publish(context.Background(), client.Message{Topic: fmt.Sprintf("probe.t%d", i), Payload: []byte("again")}); err != nil {
					t.Fatalf("probe: %v", err)
				}
				existing = append(existing, time.Since(start))
			}
			t.Logf("%s: the first creation took %v; then one creation takes %s, one publish to a topic that exists %s (%d each, one at a time)",
				p.name, firstTook.Round(10*time.Microsecond), meanP50Max(created), meanP50Max(existing), probe)
		}
	}
	regionNames := []string{r.Nodes[0].Proc().Name, r.Nodes[1].Proc().Name, r.Nodes[2].Proc().Name}
	profiled := profile("create", regionNames, metrics, time.Duration(envInt("QUICMQ_SCALE_PPROF_CREATE", 5))*time.Second)
	// CPU per topic created, summed over the nodes that create it: on a shared machine the
	// rate follows the load, the CPU a creation costs much less.
	regionProcs := []*nodeproc.Process{r.Nodes[0].Proc(), r.Nodes[1].Proc(), r.Nodes[2].Proc()}
	cpuOf := func(ps []*nodeproc.Process) time.Duration {
		var sum time.Duration
		for _, p := range ps {
			sum += procCPU(t, p.Pid())
		}
		return sum
	}
	// And how long the nodes' threads waited for a CPU: when it is many times what they ran,
	// a creation's latency is the machine's queue for its cores, not the region's work.
	schedOf := func(ps []*nodeproc.Process) (ran, waited time.Duration) {
		for _, p := range ps {
			r, w, err := nodeproc.Sched(p.Pid())
			if err != nil {
				t.Logf("%s: %v", p.Name, err)
			}
			ran, waited = ran+r, waited+w
		}
		return ran, waited
	}
	// And each node's raft engine: how long it waited for its rounds' syncs.
	syncsOf := func() (waits, syncs []float64) {
		for _, addr := range metrics {
			w, err1 := metricSum(addr, "quicmq_raft_sync_wait_seconds_total")
			n, err2 := metricSum(addr, "quicmq_raft_syncs_total")
			if err := errors.Join(err1, err2); err != nil {
				t.Logf("raft sync counters at %s: %v", addr, err)
			}
			waits, syncs = append(waits, w), append(syncs, n)
		}
		return waits, syncs
	}
	before := cpuOf(regionProcs)
	ran0, waited0 := schedOf(regionProcs)
	waits0, syncs0 := syncsOf()
	repl := create(r.Nodes[0].Proc().Addr)
	replCPU := cpuOf(regionProcs) - before
	ran1, waited1 := schedOf(regionProcs)
	waits1, syncs1 := syncsOf()
	profiled()
	t.Logf("region of 3 (--replicas 3): %d topics created in %v: %.0f topics/s; %.0f cpu-µs a topic over the three nodes (load %s)",
		n, repl.Round(time.Millisecond), float64(n)/repl.Seconds(), float64(replCPU.Microseconds())/float64(n), loadAvg())
	t.Logf("  the three nodes' threads ran %.2f s and waited %.2f s for a CPU while creating (%.2f and %.2f a second)",
		(ran1 - ran0).Seconds(), (waited1 - waited0).Seconds(), (ran1-ran0).Seconds()/repl.Seconds(), (waited1-waited0).Seconds()/repl.Seconds())
	for i, name := range regionNames {
		if syncs := syncs1[i] - syncs0[i]; syncs > 0 {
			wait := waits1[i] - waits0[i]
			t.Logf("  %s's raft engine waited for its syncs %.0f%% of the creation: %.0f syncs a second, %.2f ms each",
				name, wait/repl.Seconds()*100, syncs/repl.Seconds(), wait/syncs*1000)
		}
	}
	// QUICMQ_SCALE_AGAIN=1: then one more publish to every topic, now placed: what a
	// publish costs the region apart from its topic's creation, so that the difference is
	// what creating a topic costs (profiled as DIR/again-NAME.pprof).
	if os.Getenv("QUICMQ_SCALE_AGAIN") != "" {
		profiled := profile("again", regionNames, metrics, time.Duration(envInt("QUICMQ_SCALE_PPROF_CREATE", 5))*time.Second)
		before := cpuOf(regionProcs)
		again := create(r.Nodes[0].Proc().Addr)
		againCPU := cpuOf(regionProcs) - before
		profiled()
		t.Logf("region of 3, again: %d publishes to topics that exist in %v: %.0f/s; %.0f cpu-µs a publish over the three nodes (load %s)",
			n, again.Round(time.Millisecond), float64(n)/again.Seconds(), float64(againCPU.Microseconds())/float64(n), loadAvg())
	}
	profiled = profile("create", []string{"solo"}, []string{soloMetrics}, time.Duration(envInt("QUICMQ_SCALE_PPROF_CREATE", 5))*time.Second)
	before = cpuOf([]*nodeproc.Process{solo})
	single := create(solo.Addr)
	soloCPU := cpuOf([]*nodeproc.Process{solo}) - before
	profiled()
	t.Logf("single node: %d topics created in %v: %.0f topics/s; %.0f cpu-µs a topic",
		n, single.Round(time.Millisecond), float64(n)/single.Seconds(), float64(soloCPU.Microseconds())/float64(n))

	testlog.Pause(context.Background(), settle) // quiet, so that idle groups quiesce: not a wait for an event
	procs := []*nodeproc.Process{r.Nodes[0].Proc(), r.Nodes[1].Proc(), r.Nodes[2].Proc(), solo}
	addrs := append(metrics, soloMetrics)
	cpu0 := make([]time.Duration, len(procs))
	for i, p := range procs {
		cpu0[i] = procCPU(t, p.Pid())
	}
	t0 := time.Now()
	profiled = profile("idle", append(regionNames, "solo"), addrs, window)
	testlog.Pause(context.Background(), window) // the measurement window
	profiled()
	elapsed := time.Since(t0).Seconds()
	t.Logf("load average after the idle window: %s", loadAvg())
	// With QUICMQ_SCALE_PPROF, each node's heap after the window (DIR/heap-NAME.pprof, taken
	// after a GC): what a topic costs each node, structure by structure.
	if profDir != "" {
		for i, name := range append(regionNames, "solo") {
			if err := heapProfile(addrs[i], filepath.Join(profDir, "heap-"+name+".pprof")); err != nil {
				t.Logf("heap profile of %s: %v", name, err)
			}
		}
	}
	for i, p := range procs {
		cpu := procCPU(t, p.Pid()) - cpu0[i]
		mem := procMemory(t, p.Pid())
		lines, err := metricsLines(addrs[i])
		if err != nil {
			t.Errorf("%s /metrics: %v", p.Name, err)
		}
		t.Logf("%-6s idle CPU %.2f%% of a core over %.0f s; RSS %.0f MiB (peak %.0f MiB); /metrics %d lines",
			p.Name, cpu.Seconds()/elapsed*100, elapsed, mem.rss, mem.hwm, lines)
	}
	for _, p := range procs {
		start := time.Now()
		got, err := listTopics(bin, p.Addr, r.CADir, "s.>")
		if err != nil {
			t.Fatalf("quicmq topics at %s: %v", p.Name, err)
		}
		t.Logf("quicmq topics at %s: %d topics listed in %v", p.Name, got, time.Since(start).Round(time.Millisecond))
		if got != n {
			t.Errorf("quicmq topics at %s lists %d topics, want %d", p.Name, got, n)
		}
	}
}

// meanP50Max is "mean X, p50 Y, max Z" of ds.
func meanP50Max(ds []time.Duration) string {
	if len(ds) == 0 {
		return "nothing"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	return fmt.Sprintf("mean %v, p50 %v, max %v", r(sum/time.Duration(len(s))), r(s[len(s)/2]), r(s[len(s)-1]))
}

// loadAvg is /proc/loadavg's three load averages.
func loadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return err.Error()
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return strings.TrimSpace(string(raw))
	}
	return strings.Join(f[:3], " ")
}

// metricSum sums the samples of the series named name (any labels) on a node's /metrics.
func metricSum(addr, name string) (float64, error) {
	return metricSumURL("http://"+addr+"/metrics", name)
}

// metricSumURL is metricSum of the metrics served at url.
func metricSumURL(url, name string) (float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q: %w", name, line, err)
		}
		sum += v
	}
	return sum, sc.Err()
}

// metricsLines counts the lines of a node's /metrics.
func metricsLines(addr string) (int, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s", resp.Status)
	}
	lines := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines++
	}
	return lines, sc.Err()
}

// listTopics runs `quicmq topics --format json` against addr, as an operator would, and
// counts the rows it prints.
func listTopics(bin, addr, caDir, pattern string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "topics", "--server", addr, "--ca", filepath.Join(caDir, "ca.pem"), "--format", "json", "--pattern", pattern)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	rows := 0
	br := bufio.NewReader(out)
	for {
		line, err := br.ReadString('\n')
		if strings.HasPrefix(line, "{") {
			rows++
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return rows, err
		}
	}
	if err := cmd.Wait(); err != nil {
		return rows, fmt.Errorf("%v: %s", err, strings.TrimSpace(stderr.String()))
	}
	return rows, nil
}

// heapProfile writes the heap profile of the node serving pprof at addr, taken after a GC.
// Beside it, path with .txt for .pprof is the text form, which ends with the runtime's
// MemStats (heap in use and idle, released to the OS, stacks): what the RSS is made of.
func heapProfile(addr, path string) error {
	return errors.Join(saveURL(fmt.Sprintf("http://%s/debug/pprof/heap?gc=1", addr), path),
		saveURL(fmt.Sprintf("http://%s/debug/pprof/heap?debug=1", addr), strings.TrimSuffix(path, ".pprof")+".txt"))
}

// cpuProfile writes the CPU profile of d seconds that the node serving pprof at addr takes.
func cpuProfile(addr string, d time.Duration, path string) error {
	return saveURL(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, int(d.Seconds())), path)
}

// saveURL writes what a GET of url answers to path.
func saveURL(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
