package campaign

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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

	"github.com/quicmq/quicmq/bench/lossy"
	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/nodeproc"
	"github.com/quicmq/quicmq/internal/testlog"
)

// The harness of the network campaigns: node processes started in a namespace, and client
// helpers (this test binary run again inside a namespace, in the mode named by
// QMQ_CAMPAIGN_WORKER) that publish, count and read back, printing one line per fact.

const workerEnv = "QMQ_CAMPAIGN_WORKER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(workerEnv); mode != "" {
		if err := runWorker(mode); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// On SIGINT or SIGTERM: kill the node processes, then remove the namespaces.
	stop := lossy.CleanupOnSignal(killAllNodes)
	code := m.Run()
	stop()
	killAllNodes()
	lossy.CloseAll()
	if builtDir != "" {
		_ = os.RemoveAll(builtDir) // the 39 MB binary, built once per run
	}
	os.Exit(code)
}

// long reports whether the long variants were asked for (QUICMQ_CAMPAIGN_LONG=1).
func long() bool { return os.Getenv("QUICMQ_CAMPAIGN_LONG") == "1" }

func needHarness(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts node processes in network namespaces")
	}
	if err := lossy.Check(); err != nil {
		t.Skipf("network campaign skipped: %v", err)
	}
	if os.Getenv("QUICMQ_CAMPAIGN_SKIP") == "1" {
		t.Skip("QUICMQ_CAMPAIGN_SKIP=1")
	}
	lossy.RemoveStale()
}

var (
	buildOnce sync.Once
	builtDir  string // removed by TestMain when the tests are over
	builtBin  string
	buildErr  error
)

// quicmqBinary builds cmd/quicmq of the main module once per test run.
func quicmqBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "quicmq-campaign-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtDir, builtBin = dir, filepath.Join(dir, "quicmq")
		// Built in the main module (../..), whose go.sum has the binary's dependencies.
		cmd := exec.Command("go", "build", "-o", builtBin, "./cmd/quicmq")
		cmd.Dir = filepath.Join("..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// liveCtx is the context of every node process: killAllNodes cancels it, which kills every
// one still running (exec.CommandContext) and refuses to start more.
var liveCtx, killAllNodes = context.WithCancel(context.Background())

// node is a `quicmq node` process inside a namespace (internal/nodeproc).
type node struct {
	*nodeproc.Process
	name, region, addr, metrics string
	ns                          *lossy.Namespace
}

func (n *node) tail() string { return n.Tail() }

// startNode starts a node in ns listening on addr (IP:PORT) for clients and with the given
// extra flags, and waits until it listens.
func startNode(t *testing.T, ns *lossy.Namespace, name, region, addr, metrics, caDir string, args ...string) *node {
	t.Helper()
	o := nodeproc.Options{
		Command:      func(bin string, args ...string) *exec.Cmd { return ns.Command(liveCtx, bin, args...) },
		StartTimeout: 30 * time.Second,
	}
	p := o.Start(t, quicmqBinary(t), name, append([]string{"--anonymous", "--insecure-gossip", "--name", name, "--region", region,
		"--listen", addr, "--metrics", metrics, "--data", t.TempDir(), "--ca-dir", caDir}, args...)...)
	return &node{Process: p, name: name, region: region, addr: addr, metrics: metrics, ns: ns}
}

// waitLinks waits until every node has reported want links up.
func waitLinks(t *testing.T, nodes []*node, want int) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for _, n := range nodes {
		if err := n.WaitLinks(want, time.Until(deadline)); err != nil {
			t.Fatal(err)
		}
	}
}

// replicatedFlags are the node flags of a campaign's replicated variant: every region of
// three nodes keeps each topic on all three (a raft group per topic).
var replicatedFlags = []string{"--replicas", "3"}

// meshNode is one node of a campaign's mesh: its name, region, the IP it listens on and its
// namespace.
type meshNode struct {
	name, region, ip string
	ns               *lossy.Namespace
}

// startMesh starts the nodes of specs, node i on ports 7400+i (clients), 7500+i (gossip),
// 7600+i (WAN gossip) and 7700+i (metrics) of its IP, each joined to the other nodes of its
// region and, over WAN, to all, mirroring mirror, with the extra flags (e.g. --replicas 3);
// it waits until every node links to every other one. It returns the nodes in specs' order
// and by region.
func startMesh(t *testing.T, specs []meshNode, caDir, mirror string, extra ...string) ([]*node, map[string][]*node) {
	t.Helper()
	port := func(base, i int) string { return fmt.Sprintf("%s:%d", specs[i].ip, base+i) }
	var nodes []*node
	byRegion := map[string][]*node{}
	for i, s := range specs {
		var join, wanJoin []string
		for j, o := range specs {
			if j == i {
				continue
			}
			if o.region == s.region {
				join = append(join, port(7500, j))
			}
			wanJoin = append(wanJoin, port(7600, j))
		}
		args := append([]string{"--gossip", port(7500, i), "--wan", port(7600, i), "--join", strings.Join(join, ","),
			"--wan-join", strings.Join(wanJoin, ","), "--mirror", mirror}, extra...)
		n := startNode(t, s.ns, s.name, s.region, port(7400, i), port(7700, i), caDir, args...)
		nodes = append(nodes, n)
		byRegion[s.region] = append(byRegion[s.region], n)
	}
	waitLinks(t, nodes, len(nodes)-1)
	return nodes, byRegion
}

// worker runs this test binary in mode inside ns with env and returns its stdout lines.
func worker(ctx context.Context, ns *lossy.Namespace, mode string, env ...string) ([]string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := ns.Command(ctx, self, "-test.run=^$")
	cmd.Env = append(append(os.Environ(), workerEnv+"="+mode), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("worker %s in %s: %w: %s", mode, ns.Name, err, stderr.String())
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n"), nil
}

// pubResult is what a publishing worker reports.
type pubResult struct {
	acks                 []Ack
	producer             string
	attempted            uint64
	unavailable, failed  int
	duration             time.Duration
	errSamples           []string
	maxLatency, p50, p99 time.Duration
}

// publish runs a publishing worker: producer publishes to random topics through the nodes
// of one region (all in ns), at rate records/s (0: as fast as the pipeline allows) for d.
func publish(ctx context.Context, ns *lossy.Namespace, caDir, producer, region string, nodes []*node, topics []string, rate int, d time.Duration) (*pubResult, error) {
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.addr)
	}
	lines, err := worker(ctx, ns, "pub", "W_CA="+caDir, "W_ADDRS="+strings.Join(addrs, ","), "W_TOPICS="+strings.Join(topics, ","),
		"W_PRODUCER="+producer, "W_RATE="+strconv.Itoa(rate), "W_DURATION="+d.String())
	if err != nil {
		return nil, err
	}
	r := &pubResult{producer: producer, duration: d}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "A": // A topic offset seq
			off, _ := strconv.ParseUint(f[2], 10, 64)
			seq, _ := strconv.ParseUint(f[3], 10, 64)
			r.acks = append(r.acks, Ack{Region: region, Topic: f[1], Offset: off, Key: Key{Producer: producer, Seq: seq}})
		case "N": // N attempted unavailable failed p50 p99 max
			r.attempted, _ = strconv.ParseUint(f[1], 10, 64)
			r.unavailable, _ = strconv.Atoi(f[2])
			r.failed, _ = strconv.Atoi(f[3])
			r.p50, _ = time.ParseDuration(f[4])
			r.p99, _ = time.ParseDuration(f[5])
			r.maxLatency, _ = time.ParseDuration(f[6])
		case "E":
			r.errSamples = append(r.errSamples, strings.TrimPrefix(l, "E "))
		}
	}
	return r, nil
}

// counts returns the next offset of each topic in the region of addr.
func counts(ctx context.Context, ns *lossy.Namespace, caDir, addr string, topics []string) (map[string]uint64, error) {
	lines, err := worker(ctx, ns, "count", "W_CA="+caDir, "W_ADDR="+addr, "W_TOPICS="+strings.Join(topics, ","))
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) == 3 && f[0] == "C" {
			out[f[1]], _ = strconv.ParseUint(f[2], 10, 64)
		}
	}
	return out, nil
}

// readLogs reads every topic's log of the region of addr.
func readLogs(ctx context.Context, ns *lossy.Namespace, caDir, addr string, topics []string) (map[string][]Rec, error) {
	lines, err := worker(ctx, ns, "read", "W_CA="+caDir, "W_ADDR="+addr, "W_TOPICS="+strings.Join(topics, ","))
	if err != nil {
		return nil, err
	}
	out := map[string][]Rec{}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 8 || f[0] != "R" { // R topic offset originRegion originOffset producer seq payload
			continue
		}
		var r Rec
		r.Offset, _ = strconv.ParseUint(f[2], 10, 64)
		r.OriginRegion = f[3]
		r.OriginOffset, _ = strconv.ParseUint(f[4], 10, 64)
		r.Producer = f[5]
		r.Seq, _ = strconv.ParseUint(f[6], 10, 64)
		r.Payload = f[7]
		out[f[1]] = append(out[f[1]], r)
	}
	return out, nil
}

// gossipFails returns, per node, how many member failures its gossip pools reported, and
// per node the pools that reported them ("lan:1").
func gossipFails(ctx context.Context, ns *lossy.Namespace, nodes []*node) (map[string]int, error) {
	n, _, err := gossipFailsByPool(ctx, ns, nodes)
	return n, err
}

func gossipFailsByPool(ctx context.Context, ns *lossy.Namespace, nodes []*node) (map[string]int, map[string]string, error) {
	var ms []string
	for _, n := range nodes {
		ms = append(ms, n.name+"="+n.metrics)
	}
	lines, err := worker(ctx, ns, "fails", "W_METRICS="+strings.Join(ms, ","))
	if err != nil {
		return nil, nil, err
	}
	out, pools := map[string]int{}, map[string]string{}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) >= 3 && f[0] == "F" {
			out[f[1]], _ = strconv.Atoi(f[2])
			if len(f) > 3 {
				pools[f[1]] = f[3]
			}
		}
	}
	return out, pools, nil
}

// converge polls the regions' counts (regions[i] read through addrs[i] in nss[i]) until every
// topic has the same count everywhere twice in a row, and returns the last counts.
func converge(ctx context.Context, nss []*lossy.Namespace, caDir string, addrs []string, topics []string) (map[string]uint64, error) {
	var last string
	for {
		var first map[string]uint64
		equal := true
		for i := range nss {
			c, err := counts(ctx, nss[i], caDir, addrs[i], topics)
			if err != nil {
				return nil, err
			}
			if first == nil {
				first = c
			}
			equal = equal && fmt.Sprint(c) == fmt.Sprint(first)
		}
		if equal && fmt.Sprint(first) == last {
			return first, nil
		}
		if equal {
			last = fmt.Sprint(first)
		} else {
			last = ""
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no convergence: %w", ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// ---- the worker side (runs inside a namespace) ----

func runWorker(mode string) error {
	ca := filepath.Join(os.Getenv("W_CA"), "ca.pem")
	topics := strings.Split(os.Getenv("W_TOPICS"), ",")
	dial := func(addr string) (*client.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return client.Dial(ctx, client.Options{CAFile: ca}, addr)
	}
	switch mode {
	case "gossip":
		return workerGossip()
	case "pub":
		return workerPublish(dial, strings.Split(os.Getenv("W_ADDRS"), ","), topics)
	case "count", "read":
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		defer cancel()
		conn, err := dial(os.Getenv("W_ADDR"))
		if err != nil {
			return err
		}
		defer conn.Close()
		w := bufio.NewWriter(os.Stdout)
		defer w.Flush()
		for _, tp := range topics {
			ts, err := conn.Topics(ctx, tp)
			if err != nil {
				return fmt.Errorf("topics %s: %w", tp, err)
			}
			var next uint64
			if len(ts) > 0 {
				next = ts[0].Next
			}
			if mode == "count" {
				fmt.Fprintf(w, "C %s %d\n", tp, next)
				continue
			}
			if next == 0 {
				continue
			}
			sub, err := conn.Subscribe(ctx, tp, client.SubscribeOptions{From: client.Earliest})
			if err != nil {
				return fmt.Errorf("subscribe %s: %w", tp, err)
			}
			for i := uint64(0); i < next; i++ {
				rec, err := sub.Next(ctx)
				if err != nil {
					return fmt.Errorf("read %s after %d of %d: %w", tp, i, next, err)
				}
				fmt.Fprintf(w, "R %s %d %s %d %s %d %s\n", tp, rec.Offset, rec.OriginRegion, rec.OriginOffset, rec.ProducerID, rec.Sequence, rec.Payload)
			}
			sub.Close()
		}
		return nil
	case "fails":
		for _, nm := range strings.Split(os.Getenv("W_METRICS"), ",") {
			name, addr, _ := strings.Cut(nm, "=")
			resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + "/metrics")
			if err != nil {
				return err
			}
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			total := 0
			var pools []string
			for sc.Scan() {
				l := sc.Text()
				if strings.HasPrefix(l, "quicmq_gossip_events_total{") && strings.Contains(l, `kind="fail"`) {
					f := strings.Fields(l)
					v, _ := strconv.ParseFloat(f[len(f)-1], 64)
					total += int(v)
					if _, rest, ok := strings.Cut(l, `pool="`); ok && v > 0 {
						pool, _, _ := strings.Cut(rest, `"`)
						pools = append(pools, fmt.Sprintf("%s:%d", pool, int(v)))
					}
				}
			}
			resp.Body.Close()
			fmt.Printf("F %s %d %s\n", name, total, strings.Join(pools, ","))
		}
		return nil
	}
	return fmt.Errorf("unknown worker mode %q", mode)
}

// workerPublish publishes for W_DURATION at W_RATE records/s (0: as fast as the window of
// pending publishes allows) through random addrs, moving to another node when a connection
// breaks, and prints each ack, then the totals and the ack latency percentiles.
func workerPublish(dial func(string) (*client.Conn, error), addrs, topics []string) error {
	producer := os.Getenv("W_PRODUCER")
	rate, _ := strconv.Atoi(os.Getenv("W_RATE"))
	d, err := time.ParseDuration(os.Getenv("W_DURATION"))
	if err != nil {
		return err
	}
	out := bufio.NewWriter(os.Stdout)
	var outMu sync.Mutex // out and the figures below: the writer and the ack readers
	var lat []time.Duration
	unavailable, failed := 0, 0
	samples := map[string]bool{}
	note := func(err error) {
		msg := err.Error()
		if len(msg) > 120 {
			msg = msg[:120]
		}
		if len(samples) < 8 && !samples[msg] {
			samples[msg] = true
			fmt.Fprintf(out, "E %s\n", msg)
		}
	}
	var tick <-chan time.Time
	perTick := 1
	if rate > 0 {
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		tick = tk.C
		perTick = max(1, rate/100)
	}
	end := time.Now().Add(d)
	var seq uint64
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for time.Now().Before(end) {
		conn, err := dial(addrs[rng.IntN(len(addrs))])
		if err != nil {
			testlog.Pause(context.Background(), 100*time.Millisecond)
			continue
		}
		type pending struct {
			f     *client.Future
			topic string
			seq   uint64
			sent  time.Time
		}
		futures := make(chan pending, 8192)
		broken := make(chan struct{})
		var once sync.Once
		done := make(chan struct{})
		go func() {
			defer close(done)
			for p := range futures {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				ack, err := p.f.Wait(ctx)
				cancel()
				outMu.Lock()
				var ce *client.Error
				switch {
				case err == nil:
					lat = append(lat, time.Since(p.sent))
					fmt.Fprintf(out, "A %s %d %d\n", p.topic, ack.Offset, p.seq)
				case errors.As(err, &ce) && ce.Code == client.CodeUnavailable:
					unavailable++
					note(err)
				default:
					failed++
					note(err)
					once.Do(func() { close(broken) })
				}
				outMu.Unlock()
			}
		}()
	session:
		for time.Now().Before(end) {
			if tick != nil {
				<-tick
			}
			select {
			case <-broken:
				break session
			default:
			}
			for range perTick {
				topic := topics[rng.IntN(len(topics))]
				k := Key{Producer: producer, Seq: seq}
				f, err := conn.PublishAsync(context.Background(), client.Message{Topic: topic, Payload: []byte(Payload(k)), ProducerID: producer, Sequence: seq})
				seq++
				if err != nil {
					outMu.Lock()
					failed++
					note(err)
					outMu.Unlock()
					break session
				}
				futures <- pending{f, topic, k.Seq, time.Now()}
			}
		}
		close(futures)
		<-done
		conn.Close()
	}
	outMu.Lock()
	defer outMu.Unlock()
	pct := func(q float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		slices.Sort(lat)
		return lat[min(len(lat)-1, int(q*float64(len(lat))))]
	}
	fmt.Fprintf(out, "N %d %d %d %v %v %v\n", seq, unavailable, failed, pct(0.5), pct(0.99), pct(1))
	return out.Flush()
}
