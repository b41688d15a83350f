package main

// The replicated-publish scenario of issue 13 ("What must be shown" 4): durable publish of
// 1 KiB records from 1 and 16 clients into ONE topic, for QuicMQ R3 (three `quicmq node
// --replicas 3` processes of one region), QuicMQ R1 (one `quicmq node` process) and NATS
// JetStream R3 (three nats-server processes in one cluster, a stream with Replicas 3 and
// sync_interval: always), in the same run: records/s and publish-to-ack p50/p99.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/quicmq/quicmq/bench/lossy"
	"github.com/quicmq/quicmq/client"
)

// Systems of the replicated scenario. jetstream-r1 (one server, sync_interval: always) is
// there for context, not in the default set.
var repSystemNames = []string{"quicmq-r1", "quicmq-r3", "jetstream-r3", "jetstream-r1"}

// repAckMeans says what a publish ack means for each system.
var repAckMeans = map[string]string{
	"quicmq-r1":    "fsynced on the one node",
	"quicmq-r3":    "fsynced on a quorum (2 of 3), then applied",
	"jetstream-r3": "in the stream's raft WAL, fsynced on a quorum (sync_interval: always)",
	"jetstream-r1": "fsynced on the one server (sync_interval: always)",
}

// repTopic is the one topic (JetStream: subject of the stream REP) every client publishes to.
const repTopic = "rep.bench"

// repTopics names the n topics of a many-topic run (JetStream: subjects of the stream REP,
// which takes "rep.>"): repTopic alone for n <= 1.
func repTopics(n int) []string {
	if n <= 1 {
		return []string{repTopic}
	}
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s.t%05d", repTopic, i)
	}
	return out
}

type repParams struct {
	System   string
	Clients  int
	Topics   int // topics (JetStream: subjects of the one stream) the clients publish over, in turn; 0 or 1: repTopic
	Size     int
	Window   int // unanswered publishes per client
	Warmup   time.Duration
	Duration time.Duration
	Quicmq   string // the quicmq binary (quicmq-r1, quicmq-r3)
	// Profile, when set, is a directory for a CPU profile of each QuicMQ node over the
	// measured window (`quicmq node --pprof`), NAME-cCLIENTS-rREPEAT-nI.pprof.
	Profile string `json:",omitempty"`
	Repeat  int    `json:"-"` // for the profiles' names
	// FirstServer is the server client 0 dials (client i dials server (i + FirstServer) mod
	// the servers): 1 puts a single client on n2, the node that leads the one topic in
	// these runs, to measure a record without the relay hop.
	FirstServer int `json:",omitempty"`
}

func (p repParams) args() []string {
	return []string{"repworker", "--system", p.System, "--clients", fmt.Sprint(p.Clients), "--topics", fmt.Sprint(max(p.Topics, 1)), "--size", fmt.Sprint(p.Size),
		"--window", fmt.Sprint(p.Window), "--warmup", p.Warmup.String(), "--duration", p.Duration.String(), "--quicmq", p.Quicmq,
		"--profile", p.Profile, "--repeat", fmt.Sprint(p.Repeat), "--first-server", fmt.Sprint(p.FirstServer)}
}

type repResult struct {
	repParams
	Repeat      int
	Nodes       int
	Records     int       // acked in the window
	Rate        float64   // records/s
	P50, P99    float64   // publish-to-ack ms of the publishes acked in the window
	BrokerCPUus float64   // CPU of every broker process (user+system) per record, µs
	NodeCPUus   []float64 // the same per broker process, server i (named n<i+1>, js<i+1>) first
	// Leader is the topic's (stream's) leader after the window, from `quicmq topics --format
	// json` or JetStream's stream info ("" when not known); ClientsOnLeader of the clients
	// were connected to its server (client i dials server i mod Nodes).
	Leader          string
	Replicas        []string
	ClientsOnLeader int
	// RecordsPerEntry (QuicMQ R3): records acked in the window per raft entry committed in it,
	// from the first node's quicmq_raft_group_commit_index (summed over its groups).
	RecordsPerEntry float64
	// Hops (QuicMQ R3): QUIC packets and bytes on each hop over the window per record the
	// nodes stored in it, and UDPDatagrams, every UDP datagram of the run's namespace per
	// record stored (rephops.go).
	Hops         []repHop
	UDPDatagrams float64
	Errors       int
	AckMeans     string
	Notes        []string
	LoadAvg      float64
}

// asyncPub is one publishing connection of the replicated and groups scenarios.
type asyncPub interface {
	// send publishes payload without waiting; the returned wait blocks for its ack.
	send(ctx context.Context, payload []byte) (wait func(context.Context) error, err error)
	close()
}

// topicTurn hands out a client's topics in turn (one goroutine publishes per client).
type topicTurn struct {
	topics []string
	next   int
}

func (t *topicTurn) topic() string {
	s := t.topics[t.next]
	t.next = (t.next + 1) % len(t.topics)
	return s
}

type quicmqPub struct {
	c *client.Conn
	topicTurn
}

func dialQuicmqPub(ctx context.Context, ca, addr string, topics topicTurn, window int) (*quicmqPub, error) {
	c, err := client.Dial(ctx, client.Options{CAFile: ca, Name: "bench-pub", MaxPendingPublishes: window}, addr)
	if err != nil {
		return nil, err
	}
	return &quicmqPub{c: c, topicTurn: topics}, nil
}

func (q *quicmqPub) send(ctx context.Context, payload []byte) (func(context.Context) error, error) {
	f, err := q.c.PublishAsync(ctx, client.Message{Topic: q.topic(), Payload: payload})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { _, err := f.Wait(ctx); return err }, nil
}

func (q *quicmqPub) close() { q.c.Close() }

type jsPub struct {
	nc *nats.Conn
	js nats.JetStreamContext
	topicTurn
}

func dialJSPub(url string, subjects topicTurn, window int) (*jsPub, error) {
	nc, err := nats.Connect(url, nats.Name("bench-pub"))
	if err != nil {
		return nil, err
	}
	js, err := nc.JetStream(nats.PublishAsyncMaxPending(window))
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &jsPub{nc: nc, js: js, topicTurn: subjects}, nil
}

func (j *jsPub) send(ctx context.Context, payload []byte) (func(context.Context) error, error) {
	// Wait for room in the window instead of failing after nats.go's default 200 ms.
	f, err := j.js.PublishAsync(j.topic(), payload, nats.StallWait(time.Minute))
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		select {
		case <-f.Ok():
			return nil
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}, nil
}

func (j *jsPub) close() { j.nc.Close() }

// pipeline publishes payload() on p while more() says so, without waiting for acks (the
// client's window bounds the publishes in flight); a second goroutine waits for the acks in
// order and calls done with each publish's send time and result. It returns after the last ack.
func pipeline(ctx context.Context, p asyncPub, payload func() []byte, more func() bool, done func(sent time.Time, err error)) {
	type inflight struct {
		wait func(context.Context) error
		t    time.Time
	}
	futures := make(chan inflight, 4096)
	var wg sync.WaitGroup
	wg.Go(func() {
		for f := range futures {
			done(f.t, f.wait(ctx))
		}
	})
	defer wg.Wait()
	defer close(futures)
	for more() {
		t := time.Now()
		w, err := p.send(ctx, payload())
		if err != nil {
			done(t, err)
			return
		}
		futures <- inflight{w, t}
	}
}

// procNode is a broker process that is not this binary (a quicmq node).
type procNode struct {
	cmd  *exec.Cmd
	exit chan struct{} // closed when it has exited
	err  error         // its exit status, once exit is closed
}

// logTail is a goroutine-safe buffer of a process's last output.
type logTail struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	os.Stderr.Write(p)
	if l.b.Len() > 1<<16 {
		l.b.Reset()
	}
	return l.b.Write(p)
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startNodeProc(bin string, args ...string) (*procNode, *logTail, error) {
	cmd := exec.Command(bin, args...)
	var tail logTail
	cmd.Stderr = &tail
	cmd.Stdout = &tail
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	p := &procNode{cmd: cmd, exit: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.exit) }()
	return p, &tail, nil
}

func (p *procNode) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM and kills the process after 10 s.
func (p *procNode) stop() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exit:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.exit
	}
}

// repCluster is the brokers of one run: the processes, the address each client dials and the
// CA file QuicMQ clients trust.
type repCluster struct {
	pids        []int
	addrs       []string
	metrics     string   // QuicMQ R3: the first node's metrics address
	nodeMetrics []string // QuicMQ R3: each node's metrics address (rephops.go)
	profile     []string // with profiles: each node's metrics address, serving /debug/pprof/
	names       []string // server names, as leader reports them
	ca          string
	stop        func()
	leader      func(ctx context.Context) (leader string, replicas []string, err error)
}

// startQuicmqRegion starts n `quicmq node` processes of one region (n > 1: joined by gossip,
// with --replicas replicas) sharing one CA, and waits until each takes connections.
func startQuicmqRegion(bin string, n, replicas int, profile bool) (*repCluster, error) {
	if replicas > 1 {
		if err := checkReplicasFlag(bin); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "qmqbench-region-")
	if err != nil {
		return nil, err
	}
	cl := &repCluster{ca: filepath.Join(dir, "ca", "ca.pem")}
	cl.leader = func(ctx context.Context) (string, []string, error) { return quicmqLeader(ctx, bin, cl.ca, cl.addrs[0]) }
	var procs []*procNode
	cl.stop = func() {
		var wg sync.WaitGroup
		for _, p := range procs {
			wg.Go(p.stop)
		}
		wg.Wait()
		os.RemoveAll(dir)
	}
	for i := range n {
		addr := fmt.Sprintf("127.0.0.1:%d", 7400+i)
		args := []string{"node", "--data", filepath.Join(dir, fmt.Sprintf("n%d", i+1)), "--listen", addr,
			"--name", fmt.Sprintf("n%d", i+1), "--region", "bench", "--ca-dir", filepath.Join(dir, "ca"),
			"--anonymous", "--log-level", "warn"}
		if n > 1 {
			args = append(args, "--gossip", fmt.Sprintf("127.0.0.1:%d", 7950+i), "--insecure-gossip")
			if i > 0 {
				args = append(args, "--join", "127.0.0.1:7950")
			}
		}
		metrics := fmt.Sprintf("127.0.0.1:%d", 9400+i)
		if replicas > 1 {
			args = append(args, "--replicas", fmt.Sprint(replicas))
			if i == 0 {
				cl.metrics = metrics
			}
			cl.nodeMetrics = append(cl.nodeMetrics, metrics)
		}
		if replicas > 1 || profile {
			args = append(args, "--metrics", metrics)
		}
		if profile {
			args = append(args, "--pprof")
			cl.profile = append(cl.profile, metrics)
		}
		p, tail, err := startNodeProc(bin, args...)
		if err != nil {
			cl.stop()
			return nil, fmt.Errorf("start quicmq node %d: %w", i+1, err)
		}
		procs = append(procs, p)
		cl.pids = append(cl.pids, p.pid())
		cl.addrs = append(cl.addrs, addr)
		cl.names = append(cl.names, fmt.Sprintf("n%d", i+1))
		// The first node creates the CA the others load: wait for each before the next.
		if err := waitQuicmq(p, tail, cl.ca, addr); err != nil {
			cl.stop()
			return nil, fmt.Errorf("quicmq node %d: %w", i+1, err)
		}
	}
	return cl, nil
}

// quicmqLeader asks `quicmq topics --format json` through the node at addr for repTopic's
// leader and replicas.
func quicmqLeader(ctx context.Context, bin, ca, addr string) (string, []string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "topics", "--pattern", repTopic, "--format", "json", "--server", addr, "--ca", ca).CombinedOutput()
	if err != nil {
		return "", nil, fmt.Errorf("quicmq topics: %w: %s", err, bytes.TrimSpace(out))
	}
	for _, line := range bytes.Split(out, []byte("\n")) {
		var row struct {
			Topic    string   `json:"topic"`
			Leader   string   `json:"leader"`
			Replicas []string `json:"replicas"`
		}
		if json.Unmarshal(line, &row) == nil && row.Topic == repTopic {
			return row.Leader, row.Replicas, nil
		}
	}
	return "", nil, fmt.Errorf("quicmq topics: no row for %s in %q", repTopic, bytes.TrimSpace(out))
}

// raftCommitted is the sum of a node's quicmq_raft_group_commit_index over its groups.
func raftCommitted(addr string) (float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, fmt.Errorf("node metrics: %w", err)
	}
	defer resp.Body.Close()
	var sum float64
	found := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		if !strings.HasPrefix(sc.Text(), "quicmq_raft_group_commit_index{") {
			continue
		}
		fs := strings.Fields(sc.Text())
		v, err := strconv.ParseFloat(fs[len(fs)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("node metrics: %q: %w", sc.Text(), err)
		}
		sum += v
		found = true
	}
	if !found {
		return 0, errors.New("node metrics: no quicmq_raft_group_commit_index")
	}
	return sum, sc.Err()
}

// checkReplicasFlag refuses a quicmq binary without `node --replicas` (issue 13's wiring).
func checkReplicasFlag(bin string) error {
	out, _ := exec.Command(bin, "node", "-h").CombinedOutput()
	if !bytes.Contains(out, []byte("-replicas")) {
		return fmt.Errorf("%s has no 'node --replicas' flag: this build has no replicated topics, so R3 cannot run (build a quicmq with issue 13's wiring, or leave quicmq-r3 out of --systems)", bin)
	}
	return nil
}

// waitQuicmq waits until a client can connect to the node at addr (its CA file exists and it
// answers), or the process exits, for at most 30 s.
func waitQuicmq(p *procNode, tail *logTail, ca, addr string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-p.exit:
			return fmt.Errorf("exited (%v): %s", p.err, strings.TrimSpace(tail.String()))
		default:
		}
		if _, err := os.Stat(ca); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			c, err := client.Dial(ctx, client.Options{CAFile: ca, Name: "bench-probe"}, addr)
			cancel()
			if err == nil {
				c.Close()
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("not taking connections within 30 s: %w", err)
			}
		} else if time.Now().After(deadline) {
			return fmt.Errorf("no CA file %s within 30 s", ca)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startJetStream starts n nats-server processes (this binary's hidden "jsnode" command),
// clustered when n > 1, with JetStream and sync_interval: always, and creates the stream
// name over subjects with n replicas.
func startJetStream(n int, stream string, subjects []string, cfg func(*nats.StreamConfig)) (*repCluster, error) {
	cl := &repCluster{}
	var procs []*brokerProc
	cl.stop = func() {
		var wg sync.WaitGroup
		for _, p := range procs {
			wg.Go(p.stop)
		}
		wg.Wait()
	}
	for i := range n {
		b, err := startChild(fmt.Sprintf("nats-server %d", i+1), func(dir string) []string {
			return []string{"jsnode", "--index", fmt.Sprint(i), "--cluster-size", fmt.Sprint(n), "--dir", filepath.Join(dir, "data")}
		})
		if err != nil {
			cl.stop()
			return nil, err
		}
		procs = append(procs, b)
		cl.pids = append(cl.pids, b.pid())
		cl.addrs = append(cl.addrs, fmt.Sprintf("nats://127.0.0.1:%d", 4222+i))
		cl.names = append(cl.names, fmt.Sprintf("js%d", i+1))
	}
	// The cluster takes the stream once its meta group has a leader and every server is in.
	deadline := time.Now().Add(60 * time.Second)
	nc, err := nats.Connect(cl.addrs[0])
	if err != nil {
		cl.stop()
		return nil, err
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		cl.stop()
		return nil, err
	}
	sc := &nats.StreamConfig{Name: stream, Subjects: subjects, Storage: nats.FileStorage, Replicas: n}
	if cfg != nil {
		cfg(sc)
	}
	cl.leader = func(context.Context) (string, []string, error) {
		nc, err := nats.Connect(cl.addrs[0])
		if err != nil {
			return "", nil, err
		}
		defer nc.Close()
		js, err := nc.JetStream()
		if err != nil {
			return "", nil, err
		}
		si, err := js.StreamInfo(stream)
		if err != nil || si.Cluster == nil {
			return "", nil, fmt.Errorf("stream info %s: %v", stream, err)
		}
		reps := []string{si.Cluster.Leader}
		for _, r := range si.Cluster.Replicas {
			reps = append(reps, r.Name)
		}
		return si.Cluster.Leader, reps, nil
	}
	for {
		_, err := js.AddStream(sc)
		if err == nil {
			return cl, nil
		}
		if time.Now().After(deadline) {
			cl.stop()
			return nil, fmt.Errorf("jetstream: create stream %s with %d replicas: %w", stream, n, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// runJSNode is the hidden "jsnode" command: one nats-server with JetStream and
// sync_interval: always, server i of a cluster of --cluster-size on 127.0.0.1 (client port
// 4222+i, cluster port 6222+i). It prints READY and runs until stdin closes.
func runJSNode(args []string) error {
	fs := flag.NewFlagSet("jsnode", flag.ExitOnError)
	index := fs.Int("index", 0, "this server's index in the cluster")
	size := fs.Int("cluster-size", 1, "servers in the cluster (1: no cluster)")
	dir := fs.String("dir", "", "JetStream store directory")
	syncAlways := fs.Bool("sync", true, "sync_interval: always (an fsync per write before the ack)")
	fs.Parse(args)
	opts := &server.Options{
		ServerName: fmt.Sprintf("js%d", *index+1), Host: "127.0.0.1", Port: 4222 + *index, NoSigs: true, NoLog: true,
		JetStream: true, StoreDir: *dir, SyncAlways: *syncAlways,
	}
	if *size > 1 {
		opts.Cluster = server.ClusterOpts{Name: "bench", Host: "127.0.0.1", Port: 6222 + *index}
		var routes []string
		for i := range *size {
			if i != *index {
				routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", 6222+i))
			}
		}
		opts.Routes = server.RoutesFromStr(strings.Join(routes, ","))
	}
	ctx, stop := brokerContext()
	defer stop()
	return serveNATS(ctx, opts)
}

// brokerContext is a broker child's life: it ends on SIGTERM or SIGINT, or when the parent
// closes the child's stdin (or dies).
func brokerContext() (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	go func() {
		io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	return ctx, stop
}

// startRepCluster starts the brokers of system sys.
func startRepCluster(sys, quicmqBin string, profile bool) (*repCluster, error) {
	switch sys {
	case "quicmq-r1":
		return startQuicmqRegion(quicmqBin, 1, 1, profile)
	case "quicmq-r3":
		return startQuicmqRegion(quicmqBin, 3, 3, profile)
	case "jetstream-r3":
		return startJetStream(3, "REP", []string{"rep.>"}, nil)
	case "jetstream-r1":
		return startJetStream(1, "REP", []string{"rep.>"}, nil)
	}
	return nil, fmt.Errorf("unknown system %q (want one of %v)", sys, repSystemNames)
}

// dialRepClient connects client i of a run to broker i % len(addrs): clients are spread
// over the servers, as a client list of a region would spread them. It publishes over
// topics in turn, starting where client i's share of them begins.
func dialRepClient(ctx context.Context, sys string, cl *repCluster, i, first, clients, window int, topics []string) (asyncPub, error) {
	addr := cl.addrs[(i+first)%len(cl.addrs)]
	turn := topicTurn{topics: topics, next: i * len(topics) / max(clients, 1)}
	if strings.HasPrefix(sys, "quicmq") {
		return dialQuicmqPub(ctx, cl.ca, addr, turn, window)
	}
	return dialJSPub(addr, turn, window)
}

// profileNodes starts fetching a CPU profile of the measured window from each node of cl
// that serves one, and returns a function that waits for them; a failure is a note.
func profileNodes(cl *repCluster, p repParams, notes *[]string) (wait func()) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	secs := max(1, int(p.Duration.Seconds()))
	for i, addr := range cl.profile {
		wg.Go(func() {
			name := filepath.Join(p.Profile, fmt.Sprintf("%s-c%d-r%d-n%d.pprof", p.System, p.Clients, p.Repeat, i+1))
			err := fetchProfile(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs), name)
			if err != nil {
				mu.Lock()
				*notes = append(*notes, fmt.Sprintf("profile of node %d: %v", i+1, err))
				mu.Unlock()
			}
		})
	}
	return wg.Wait
}

func fetchProfile(url, file string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// runRepWorker is the hidden "repworker" command: inside the run's namespace it starts the
// brokers, publishes from the clients and prints its repResult as JSON.
func runRepWorker(args []string) error {
	var p repParams
	fs := flag.NewFlagSet("repworker", flag.ExitOnError)
	fs.StringVar(&p.System, "system", "quicmq-r1", "system")
	fs.IntVar(&p.Clients, "clients", 1, "publishing clients (connections)")
	fs.IntVar(&p.Topics, "topics", 1, "topics the clients publish over, in turn")
	fs.IntVar(&p.Size, "size", 1024, "payload bytes")
	fs.IntVar(&p.Window, "window", 1024, "unanswered publishes per client")
	fs.DurationVar(&p.Warmup, "warmup", time.Second, "publishing before the window")
	fs.DurationVar(&p.Duration, "duration", 5*time.Second, "measured window")
	fs.StringVar(&p.Quicmq, "quicmq", "", "the quicmq binary")
	fs.StringVar(&p.Profile, "profile", "", "directory for the QuicMQ nodes' CPU profiles of the window")
	fs.IntVar(&p.Repeat, "repeat", 1, "the repeat this run is (names the profiles)")
	fs.IntVar(&p.FirstServer, "first-server", 0, "the server client 0 dials")
	fs.Parse(args)
	cl, err := startRepCluster(p.System, p.Quicmq, p.Profile != "")
	if err != nil {
		return err
	}
	defer cl.stop()
	ctx, cancel := context.WithTimeout(context.Background(), p.Warmup+p.Duration+5*time.Minute)
	defer cancel()
	res := &repResult{repParams: p, Nodes: len(cl.pids), AckMeans: repAckMeans[p.System]}
	var pubs []asyncPub
	defer func() {
		for _, c := range pubs {
			c.close()
		}
	}()
	topics := repTopics(p.Topics)
	for i := range p.Clients {
		c, err := dialRepClient(ctx, p.System, cl, i, p.FirstServer, p.Clients, p.Window, topics)
		if err != nil {
			return fmt.Errorf("%s: client %d: %w", p.System, i, err)
		}
		pubs = append(pubs, c)
	}
	// The first publish to each topic creates it (QuicMQ R3: places it on a raft group,
	// electing the group's leader if new): retried until acked, so that the window
	// measures publishing only.
	created := time.Now()
	if err := createTopics(ctx, pubs[0], len(topics), p.Size); err != nil {
		return fmt.Errorf("%s: first publish: %w", p.System, err)
	}
	if len(topics) > 1 {
		// Issue 29's first figure: topics created by their first publish, per second.
		el := time.Since(created)
		res.Notes = append(res.Notes, fmt.Sprintf("%d topics created in %v: %.0f topics/s", len(topics), el.Round(time.Millisecond), float64(len(topics))/el.Seconds()))
	}
	load := startRepLoad(ctx, pubs, p.Size)
	time.Sleep(p.Warmup)
	var entries0 float64
	read0 := false // entries0 was read: without it the window's entries are unknown
	if cl.metrics != "" {
		if entries0, err = raftCommitted(cl.metrics); err != nil {
			res.Notes = append(res.Notes, err.Error())
		}
		read0 = err == nil
	}
	hops0, hopsErr := readHops(pubs, cl.names, cl.nodeMetrics)
	cpu0, t0 := clusterCPU(cl), time.Now()
	load.counting.Store(true)
	profiled := profileNodes(cl, p, &res.Notes)
	time.Sleep(p.Duration)
	load.counting.Store(false)
	cpu1, el := clusterCPU(cl), time.Since(t0)
	hops1, err := readHops(pubs, cl.names, cl.nodeMetrics)
	profiled()
	if read0 {
		if entries1, err := raftCommitted(cl.metrics); err == nil && entries1 > entries0 {
			res.RecordsPerEntry = float64(load.acked.Load()) / (entries1 - entries0)
		}
	}
	load.stop()
	if len(cl.pids) > 1 && len(topics) == 1 { // many topics: leaders spread over the groups
		var err error
		if res.Leader, res.Replicas, err = cl.leader(ctx); err != nil {
			res.Notes = append(res.Notes, "leader unknown: "+err.Error())
		}
		for i := range p.Clients {
			if res.Leader != "" && cl.names[(i+p.FirstServer)%len(cl.names)] == res.Leader {
				res.ClientsOnLeader++
			}
		}
	}
	res.Records = int(load.acked.Load())
	switch {
	case len(cl.nodeMetrics) == 0:
	case hopsErr != nil || err != nil:
		res.Notes = append(res.Notes, fmt.Sprintf("hop counters: %v", errors.Join(hopsErr, err)))
	default:
		res.Hops, res.UDPDatagrams = hopsPerRecord(hops0, hops1)
	}
	res.Rate = float64(res.Records) / el.Seconds()
	res.P50, res.P99 = load.hist.quantile(0.5, 0), load.hist.quantile(0.99, 0)
	res.Errors = int(load.errs.Load())
	if e, ok := load.firstErr.Load().(string); ok {
		res.Notes = append(res.Notes, "first error: "+e)
	}
	if res.Records > 0 {
		perRecord := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / float64(res.Records) }
		var sum time.Duration
		for i := range cpu0 {
			sum += cpu1[i] - cpu0[i]
			res.NodeCPUus = append(res.NodeCPUus, perRecord(cpu1[i]-cpu0[i]))
		}
		res.BrokerCPUus = perRecord(sum)
	}
	res.LoadAvg = loadAvg()
	return json.NewEncoder(os.Stdout).Encode(res)
}

// repLoad is the replicated run's publishers: each client publishes size-byte records
// pipelined until stop; while counting, acknowledgements are counted and timed.
type repLoad struct {
	hist        latHist
	counting    atomic.Bool
	acked, errs atomic.Int64
	firstErr    atomic.Value // string
	done        chan struct{}
	wg          sync.WaitGroup
}

func startRepLoad(ctx context.Context, pubs []asyncPub, size int) *repLoad {
	l := &repLoad{done: make(chan struct{})}
	payload := make([]byte, size)
	for _, c := range pubs {
		l.wg.Go(func() {
			pipeline(ctx, c, func() []byte { return payload }, func() bool {
				select {
				case <-l.done:
					return false
				default:
					return true
				}
			}, func(sent time.Time, err error) {
				if err != nil {
					if l.errs.Add(1) == 1 {
						l.firstErr.Store(err.Error())
					}
					return
				}
				if l.counting.Load() {
					l.acked.Add(1)
					l.hist.add(int64(time.Since(sent)))
				}
			})
		})
	}
	return l
}

func (l *repLoad) stop() {
	close(l.done)
	l.wg.Wait()
}

// createTopics publishes one record to each of n topics through p (which takes its topics
// in turn), pipelined, every topic again while any of them failed (a replicated topic's
// group may still be electing its leader), for at most a minute.
func createTopics(ctx context.Context, p asyncPub, n, size int) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		waits := make([]func(context.Context) error, 0, n)
		var err error
		for range n {
			var w func(context.Context) error
			if w, err = p.send(ctx, make([]byte, size)); err != nil {
				break
			}
			waits = append(waits, w)
		}
		for _, w := range waits {
			if e := w(ctx); e != nil && err == nil {
				err = e
			}
		}
		if err == nil || ctx.Err() != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// firstPublish publishes one record until it is acked, for at most a minute.
func firstPublish(ctx context.Context, p asyncPub, size int) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		w, err := p.send(ctx, make([]byte, size))
		if err == nil {
			if err = w(ctx); err == nil {
				return nil
			}
		}
		if ctx.Err() != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// clusterCPU is the CPU time so far of each broker process.
func clusterCPU(cl *repCluster) []time.Duration {
	var t []time.Duration
	for _, pid := range cl.pids {
		t = append(t, brokerCPU(pid))
	}
	return t
}

// runReplicated is the "replicated" command.
func runReplicated(args []string) error {
	fs := flag.NewFlagSet("replicated", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: qmqbench replicated [flags]

Durable publish into one topic from 1 and 16 clients (spread over the servers), pipelined,
for QuicMQ R3 (three 'quicmq node --replicas 3' processes of one region), QuicMQ R1 (one
node) and NATS JetStream R3 (three clustered nats-server processes, a stream with Replicas
3, sync_interval: always) in the same run: records/s, publish-to-ack p50/p99 and the broker
processes' CPU per record, with the ratios R3/JetStream-R3 (goal >= 1.5) and R3/R1.
--topics 1,1000 adds runs over 1,000 topics (JetStream: 1,000 subjects of its one stream),
each client taking them in turn, and each system's many-topic rate over its one-topic rate. Each run
has a network namespace of its own, no loss. Without a quicmq that has --replicas, R3 is
refused.

`)
		fs.PrintDefaults()
	}
	systemsFlag := fs.String("systems", "quicmq-r1,quicmq-r3,jetstream-r3", "systems, comma-separated: "+strings.Join(repSystemNames, ","))
	clientsFlag := fs.String("clients", "1,16", "publishing clients, comma-separated")
	topicsFlag := fs.String("topics", "1", "topics the clients publish over in turn, comma-separated: 1 is the one topic rep.bench; N > 1 is N topics rep.bench.tNNNNN (JetStream: N subjects of the one stream REP); 1,1000 runs both")
	size := fs.Int("size", 1024, "payload bytes")
	window := fs.Int("window", 1024, "unanswered publishes per client (both systems)")
	warmup := fs.Duration("warmup", time.Second, "publishing before the measured window")
	dur := fs.Duration("duration", 10*time.Second, "measured window")
	repeat := fs.Int("repeat", 1, "repetitions (medians are reported)")
	firstServer := fs.Int("first-server", 0, "the server client 0 dials (client i dials server i+N mod the servers): 1 puts one client on n2, the one topic's leader in these runs")
	quicmqBin := fs.String("quicmq", "", "the quicmq binary (default: built from ./cmd/quicmq, so run from the repository root)")
	out := fs.String("out", defaultOut, "directory for JSON results and PNG plots")
	profile := fs.String("profile", "", "directory for a CPU profile of each QuicMQ node over each measured window (NAME-cCLIENTS-rREPEAT-nI.pprof; read with 'go tool pprof -top QUICMQ FILE')")
	fs.Parse(args)
	clients, err := parseInts(*clientsFlag)
	if err != nil {
		return fmt.Errorf("--clients: %w", err)
	}
	topicCounts, err := parseInts(*topicsFlag)
	if err != nil {
		return fmt.Errorf("--topics: %w", err)
	}
	for _, n := range topicCounts {
		if n < 1 || n > 100_000 {
			return fmt.Errorf("--topics: %d: want 1 to 100000 topics", n)
		}
	}
	systems := strings.Split(*systemsFlag, ",")
	bin, cleanup, err := repBinary(systems, *quicmqBin)
	if err != nil {
		return err
	}
	defer cleanup()
	if *size < 1 || *window < 1 || *dur <= 0 || *warmup < 0 || *repeat < 1 {
		return fmt.Errorf("--size %d --window %d --duration %v --warmup %v --repeat %d: want positive sizes and durations", *size, *window, *dur, *warmup, *repeat)
	}
	if err := lossy.Check(); err != nil {
		return fmt.Errorf("%w; this scenario runs each broker in a namespace of its own and is skipped", err)
	}
	slot, stop := killOnSignal()
	defer stop()
	var results []*repResult
	total := *repeat * len(clients) * len(topicCounts) * len(systems)
	started := time.Now()
	for r := 1; r <= *repeat; r++ {
		for _, nc := range clients {
			for _, nt := range topicCounts {
				for _, sys := range systems {
					p := repParams{System: sys, Clients: nc, Topics: nt, Size: *size, Window: *window, Warmup: *warmup, Duration: *dur, Quicmq: bin, Repeat: r, FirstServer: *firstServer}
					if *profile != "" && strings.HasPrefix(sys, "quicmq") {
						if p.Profile, err = filepath.Abs(*profile); err != nil {
							return err
						}
						if err := os.MkdirAll(p.Profile, 0o755); err != nil {
							return fmt.Errorf("--profile: %w", err)
						}
					}
					fmt.Fprintf(os.Stderr, "[%d/%d %s] repeat %d: %s, %d clients, %d topics ...", len(results)+1, total, time.Since(started).Round(time.Second), r, sys, nc, nt)
					var res repResult
					if err := workerIn(sys, p.Warmup+p.Duration+5*time.Minute, func(string) []string { return p.args() }, &res, slot); err != nil {
						fmt.Fprintf(os.Stderr, " failed: %v\n", err)
						continue
					}
					res.Repeat = r
					fmt.Fprintf(os.Stderr, " %.0f records/s, ack p50 %.2f p99 %.1f ms, %.1f broker cpu-µs/record %.1f, leader %q (%d clients on it), %.1f records/raft entry, %d errors %v\n",
						res.Rate, res.P50, res.P99, res.BrokerCPUus, res.NodeCPUus, res.Leader, res.ClientsOnLeader, res.RecordsPerEntry, res.Errors, res.Notes)
					if res.Hops != nil {
						fmt.Fprintf(os.Stderr, "    %s\n", formatHops(res.Hops, res.UDPDatagrams))
					}
					results = append(results, &res)
				}
			}
		}
	}
	path, err := saveResults(*out, "replicated", results)
	if err != nil {
		return err
	}
	printReplicated(results, systems, clients, topicCounts)
	if err := plotReplicated(results, systems, clients, topicCounts, *size, path); err != nil {
		return err
	}
	if len(results) < total {
		return errors.New("some runs failed (see above)")
	}
	return nil
}

// repBinary checks the systems named and returns the quicmq binary the QuicMQ ones run:
// flagBin made absolute, or one built from ./cmd/quicmq (removed by cleanup). R3 needs a
// binary with --replicas.
func repBinary(systems []string, flagBin string) (bin string, cleanup func(), err error) {
	cleanup = func() {}
	for _, s := range systems {
		if !slices.Contains(repSystemNames, s) {
			return "", cleanup, fmt.Errorf("--systems: unknown system %q (want %v)", s, repSystemNames)
		}
		if strings.HasPrefix(s, "quicmq") && bin == "" {
			if flagBin == "" {
				if bin, cleanup, err = buildQuicmq("."); err != nil {
					return "", func() {}, err
				}
			} else if bin, err = filepath.Abs(flagBin); err != nil {
				return "", cleanup, err
			}
		}
		if s == "quicmq-r3" {
			if err := checkReplicasFlag(bin); err != nil {
				return "", cleanup, err
			}
		}
	}
	return bin, cleanup, nil
}

// plotReplicated draws the median records/s of each system, client count and topic count
// beside the results at path.
func plotReplicated(results []*repResult, systems []string, clients, topicCounts []int, size int, path string) error {
	var labels []string
	var values []float64
	for _, nc := range clients {
		for _, nt := range topicCounts {
			for _, sys := range systems {
				if g := pickRep(results, sys, nc, nt); len(g) > 0 {
					label := fmt.Sprintf("%s x%d", sys, nc)
					if nt > 1 {
						label += fmt.Sprintf(", %d topics", nt)
					}
					labels = append(labels, label)
					values = append(values, medianOf(g, func(r *repResult) float64 { return r.Rate }).med)
				}
			}
		}
	}
	return plotBars(fmt.Sprintf("replicated durable publish, %d B records (median records/s)", size), "records/s", labels, values, path)
}

func pickRep(rs []*repResult, sys string, clients, topics int) []*repResult {
	var out []*repResult
	for _, r := range rs {
		if r.System == sys && r.Clients == clients && max(r.Topics, 1) == topics {
			out = append(out, r)
		}
	}
	return out
}

// printReplicated prints one row per (clients, topics, system), then the ratios per client
// and topic count (medians over repeats, ratios within a repeat), and where a run had many
// topics, each system's many-topic rate over its one-topic rate with as many clients.
func printReplicated(rs []*repResult, systems []string, clients, topicCounts []int) {
	fmt.Println("| system | ack means | clients | topics | records/s | ack p50 ms | ack p99 ms | broker cpu-µs/record | leader: clients on its server | records per raft entry | errors |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	for _, nc := range clients {
		for _, nt := range topicCounts {
			for _, sys := range systems {
				g := pickRep(rs, sys, nc, nt)
				if len(g) == 0 {
					continue
				}
				var errs int
				for _, r := range g {
					errs += r.Errors
				}
				onLeader := "-" // one server (every client is on the leader's), or many topics (leaders spread)
				if g[0].Nodes > 1 && nt == 1 {
					var vs []string
					for _, r := range g {
						vs = append(vs, fmt.Sprintf("%s: %d", r.Leader, r.ClientsOnLeader))
					}
					onLeader = strings.Join(vs, ", ")
				}
				perEntry := "-"
				if g[0].RecordsPerEntry > 0 {
					perEntry = medianOf(g, func(r *repResult) float64 { return r.RecordsPerEntry }).String()
				}
				fmt.Printf("| %s | %s | %d | %d | %v | %v | %v | %v | %s | %s | %d |\n", sys, repAckMeans[sys], nc, nt,
					medianOf(g, func(r *repResult) float64 { return r.Rate }),
					medianOf(g, func(r *repResult) float64 { return r.P50 }),
					medianOf(g, func(r *repResult) float64 { return r.P99 }),
					medianOf(g, func(r *repResult) float64 { return r.BrokerCPUus }), onLeader, perEntry, errs)
			}
		}
	}
	ratio := func(a []*repResult, b []*repResult) string {
		var vs []float64
		for _, x := range a {
			for _, y := range b {
				if x.Repeat == y.Repeat && y.Rate > 0 {
					vs = append(vs, x.Rate/y.Rate)
				}
			}
		}
		if len(vs) == 0 {
			return "-"
		}
		return median(vs).String()
	}
	fmt.Println()
	fmt.Println("| clients | topics | records/s R3/JetStream-R3 (goal >= 1.5) | R3/R1 |")
	fmt.Println("|---|---|---|---|")
	for _, nc := range clients {
		for _, nt := range topicCounts {
			fmt.Printf("| %d | %d | %s | %s |\n", nc, nt, ratio(pickRep(rs, "quicmq-r3", nc, nt), pickRep(rs, "jetstream-r3", nc, nt)),
				ratio(pickRep(rs, "quicmq-r3", nc, nt), pickRep(rs, "quicmq-r1", nc, nt)))
		}
	}
	if !slices.Contains(topicCounts, 1) || len(topicCounts) < 2 {
		return
	}
	fmt.Println()
	fmt.Println("| system | clients | topics | records/s over its one-topic rate (goal for quicmq-r3: >= 1) |")
	fmt.Println("|---|---|---|---|")
	for _, nc := range clients {
		for _, nt := range topicCounts {
			if nt == 1 {
				continue
			}
			for _, sys := range systems {
				fmt.Printf("| %s | %d | %d | %s |\n", sys, nc, nt, ratio(pickRep(rs, sys, nc, nt), pickRep(rs, sys, nc, 1)))
			}
		}
	}
}
