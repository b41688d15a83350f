package main

// Issue 34's figure 3: the loss scenarios (fanout, hetero) measured again with N idle
// mirrored topics beside the hot ones (--idle-mirrored). With N > 0 a run's namespace (where
// the worker, its clients and the node under test live) is joined by a veth pair to a second
// namespace holding a second region of one node, "idle", and both nodes --mirror 'idle.>'.
// Before the measured window the worker creates N topics idle.tNNNNNN at the idle region's
// node by one publish each, waits until the node under test lists them all (mirrored into its
// own log over the link) and until both nodes' links have parked every mirror (no mirror
// stream open, none waiting). So the node serving the hot path also holds N mirrored topics,
// their cursors, N parked mirrors of its link to the idle region (and the idle region's N
// parked mirrors of its copies, served by it), the link's catalog stream and keep-alives,
// and both gossip pools. The hot topics are then measured exactly as without them.
//
// The link's and gossip's packets reach the run's namespace on the veth, the clients' on lo:
// the loss rule takes only packets arriving on lo, since the loss scenarios are about the
// clients' network and a link between regions crosses another one. The one other difference
// from a run without idle mirrors: the node under test listens on 0.0.0.0:7400 (clients still
// dial 127.0.0.1:7400) so that the idle region's node can reach it.

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quicmq/quicmq/bench/lossy"
	"github.com/quicmq/quicmq/client"
)

const (
	idlePattern = "idle.>"
	// idleHotMetrics is where the node under test serves its metrics (inside the run's
	// namespace, where nothing else listens) for the wait until its mirrors are parked.
	idleHotMetrics = "127.0.0.1:7490"
	// idleSetupTimeout bounds the creation, listing and parking of the idle topics.
	idleSetupTimeout = 5 * time.Minute
)

func idleTopic(i int) string { return fmt.Sprintf("idle.t%06d", i) }

// idleMirrors is a run's idle mirrored topics: what the worker needs to set them up.
type idleMirrors struct {
	N int // idle mirrored topics; 0: none, the scenario exactly as without the option (unless Mesh)
	// Mesh: the idle region's node runs and federates with the node under test also with N
	// 0 (--idle-mirrored mesh): what the mesh costs apart from the topics.
	Mesh         bool
	NS           string // the idle region's namespace, joined to the run's by a veth pair
	AddrA, AddrB string // the veth pair's addresses: in the run's namespace, in the idle region's
	// Settle is how long the worker waits after every mirror parked before the window: the
	// catch-up's garbage collected and its writes compacted, the topics idle.
	Settle time.Duration
}

func (m *idleMirrors) workerFlags(fs *flag.FlagSet) {
	fs.IntVar(&m.N, "idle-mirrored", 0, "idle mirrored topics beside the hot ones")
	fs.BoolVar(&m.Mesh, "idle-mesh", false, "the idle region's node runs also with no idle mirrored topic")
	fs.StringVar(&m.NS, "idle-ns", "", "the idle region's network namespace")
	fs.StringVar(&m.AddrA, "idle-addr-a", "", "this namespace's address on the veth pair to the idle region")
	fs.StringVar(&m.AddrB, "idle-addr-b", "", "the idle region's address on the veth pair")
	fs.DurationVar(&m.Settle, "idle-settle", 0, "wait after every mirror parked, before the window")
}

func (m idleMirrors) args() []string {
	if !m.on() {
		return nil
	}
	return []string{"--idle-mirrored", strconv.Itoa(m.N), "--idle-mesh=" + strconv.FormatBool(m.Mesh), "--idle-ns", m.NS,
		"--idle-addr-a", m.AddrA, "--idle-addr-b", m.AddrB, "--idle-settle", m.Settle.String()}
}

// on reports whether the run has the idle region's node beside the node under test.
func (m idleMirrors) on() bool { return m.N > 0 || m.Mesh }

// arm is the run's configuration of --idle-mirrored.
func (m idleMirrors) arm() idleArm { return idleArm{N: m.N, Mesh: m.on()} }

// set makes m the configuration a.
func (m *idleMirrors) set(a idleArm) { m.N, m.Mesh = a.N, a.Mesh }

// idleArm is one configuration of --idle-mirrored: N idle mirrored topics of a second
// region (Mesh: that region's node runs, always with N > 0). "0" is the scenario as
// without the option; "mesh" the second region's node federated with the node under test
// and no topic, which tells what the mesh costs (gossip, the link, a second process on the
// cores) from what the topics cost.
type idleArm struct {
	N    int
	Mesh bool
}

func (a idleArm) String() string {
	if a.N == 0 && a.Mesh {
		return "mesh"
	}
	return strconv.Itoa(a.N)
}

// bases are the arms of arms a's figures are compared with: "0", and "mesh" for an arm with
// topics (what the topics cost beyond the mesh).
func (a idleArm) bases(arms []idleArm) []idleArm {
	var out []idleArm
	none, mesh := idleArm{}, idleArm{Mesh: true}
	for _, b := range []idleArm{none, mesh} {
		if a != b && slices.Contains(arms, b) && (b == none || a.N > 0) {
			out = append(out, b)
		}
	}
	return out
}

// parseIdleCounts parses --idle-mirrored: counts of idle mirrored topics, comma-separated,
// and "mesh" (the idle region's node with no topic).
func parseIdleCounts(s string) ([]idleArm, error) {
	var out []idleArm
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "mesh" {
			out = append(out, idleArm{Mesh: true})
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 || n > 1_000_000 {
			return nil, fmt.Errorf("%q: want counts of topics from 0 to 1000000 or mesh, comma-separated (e.g. 0,mesh,10000)", f)
		}
		out = append(out, idleArm{N: n, Mesh: n > 0})
	}
	return out, nil
}

// idleOrder is the order of the idle counts in repeat r: reversed every other repeat, so
// that a drift of the machine's load over a run weighs on each count alike.
func idleOrder(idles []idleArm, r int) []idleArm {
	out := slices.Clone(idles)
	if r%2 == 0 {
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	return out
}

// checkIdleSystems refuses idle mirrored topics for a system without federation.
func checkIdleSystems(idles []idleArm, systems []string) error {
	for _, n := range idles {
		if !n.Mesh {
			continue
		}
		for _, s := range systems {
			if s != "quicmq" && s != "ablation" {
				return fmt.Errorf("--idle-mirrored %v: idle mirrored topics are QuicMQ's federation (systems quicmq, ablation), not %s: run it with --systems quicmq", n, s)
			}
		}
	}
	return nil
}

// idlePeerNet creates, in the host, the idle region's namespace joined to ns, the run's, by
// a veth pair, and returns m with their names and addresses; closing it removes the
// namespace (and the pair). The worker starts the idle region's node in it.
func idlePeerNet(ns *lossy.Namespace, m idleMirrors) (idleMirrors, func(), error) {
	peer, err := lossy.New("idle")
	if err != nil {
		return m, nil, err
	}
	l, err := lossy.Connect(ns, peer)
	if err != nil {
		peer.Close()
		return m, nil, err
	}
	m.NS, m.AddrA, m.AddrB = peer.Name, l.AddrA, l.AddrB
	return m, func() { peer.Close() }, nil
}

// hotArgs are the broker flags of the node under test: a region of its own, federated
// with the idle one, mirroring idle.>. None without idle mirrored topics.
func (m idleMirrors) hotArgs() []string {
	if !m.on() {
		return nil
	}
	return []string{"--listen", "0.0.0.0:7400", "--advertise", m.AddrA + ":7400",
		"--gossip", m.AddrA + ":7500", "--wan", m.AddrA + ":7600", "--mirror", idlePattern,
		"--metrics", idleHotMetrics}
}

// lossMatch narrows a loss rule's nftables match to the clients' packets (those on lo)
// when the link to the idle region is there.
func (m idleMirrors) lossMatch(match string) string {
	if !m.on() {
		return match
	}
	return strings.TrimSpace(`iifname "lo" ` + match)
}

// start starts the idle region's node, creates the N topics there, and waits until the
// node under test (started with hotArgs; hotDir is its broker directory) lists them all and
// both nodes' links have parked every mirror. It returns the idle node (stop it) and the
// seconds the whole took. Progress goes to stderr.
func (m idleMirrors) start(hotDir string) (peer *brokerProc, secs float64, err error) {
	if m.NS == "" || m.AddrA == "" || m.AddrB == "" {
		return nil, 0, errors.New("idle mirrored topics: no namespace or addresses for the idle region")
	}
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), idleSetupTimeout)
	defer cancel()
	caDir := filepath.Join(hotDir, "data", "tls") // the node under test made the mesh's CA
	peer, err = startChildIn(m.NS, "idle region", func(dir string) []string {
		return []string{"broker", "--kind", "quicmq", "--dir", filepath.Join(dir, "data"),
			"--listen", m.AddrB + ":7400", "--name", "idle", "--region", "idle",
			"--gossip", m.AddrB + ":7500", "--wan", m.AddrB + ":7600", "--wan-join", m.AddrA + ":7600",
			"--mirror", idlePattern, "--ca-dir", caDir, "--metrics", m.AddrB + ":7490"}
	})
	if err != nil {
		return nil, 0, fmt.Errorf("idle mirrored topics: %w", err)
	}
	fail := func(err error) (*brokerProc, float64, error) {
		peer.stop()
		return nil, 0, fmt.Errorf("idle mirrored topics: %w", err)
	}
	ca := filepath.Join(caDir, "ca.pem")
	if err := m.create(ctx, ca); err != nil {
		return fail(err)
	}
	created := time.Since(t0)
	if err := m.waitListed(ctx, ca); err != nil {
		return fail(err)
	}
	listed := time.Since(t0)
	if err := m.waitParked(ctx); err != nil {
		return fail(err)
	}
	fmt.Fprintf(os.Stderr, "\n  idle mirrored: %d topics created at the idle region in %.1f s, listed at the node under test after %.1f s, every mirror parked after %.1f s; settling %v\n",
		m.N, created.Seconds(), listed.Seconds(), time.Since(t0).Seconds(), m.Settle)
	secs = time.Since(t0).Seconds()
	time.Sleep(m.Settle) // the state to measure beside is the topics idle: nothing to wait for
	return peer, secs, nil
}

// create publishes one record to each of the N topics at the idle region's node, pipelined.
func (m idleMirrors) create(ctx context.Context, ca string) error {
	// A 30 s idle timeout: at load 15-25 on two cores the default 2 s ended the creator's
	// connection mid-creation (the set-up's, not what the run measures).
	c, err := client.Dial(ctx, client.Options{CAFile: ca, Name: "idle-creator", IdleTimeout: 30 * time.Second}, m.AddrB+":7400")
	if err != nil {
		return fmt.Errorf("dial the idle region: %w", err)
	}
	defer c.Close()
	futures := make(chan *client.Future, 4096)
	acked := make(chan error, 1)
	go func() {
		var first error
		for f := range futures {
			if _, err := f.Wait(ctx); err != nil && first == nil {
				first = err
			}
		}
		acked <- first
	}()
	var pubErr error
	for i := 0; i < m.N && pubErr == nil; i++ {
		var f *client.Future
		if f, pubErr = c.PublishAsync(ctx, client.Message{Topic: idleTopic(i), Payload: []byte("idle")}); pubErr == nil {
			futures <- f
		}
	}
	close(futures)
	if err := <-acked; pubErr == nil {
		pubErr = err
	}
	if pubErr != nil {
		return fmt.Errorf("create the topics: %w", pubErr)
	}
	return nil
}

// waitListed waits until the node under test lists all N topics.
func (m idleMirrors) waitListed(ctx context.Context, ca string) error {
	c, err := client.Dial(ctx, client.Options{CAFile: ca, Name: "idle-lister", IdleTimeout: 30 * time.Second}, quicmqAddr)
	if err != nil {
		return fmt.Errorf("dial the node under test: %w", err)
	}
	defer c.Close()
	next := time.Now().Add(5 * time.Second)
	for {
		n := 0
		if err := c.TopicsEach(ctx, idlePattern, func(client.TopicInfo) error { n++; return nil }); err != nil {
			return fmt.Errorf("list %s at the node under test: %w", idlePattern, err)
		}
		if n >= m.N {
			return nil
		}
		if time.Now().After(next) {
			fmt.Fprintf(os.Stderr, "\n  idle mirrored: %d of %d listed at the node under test", n, m.N)
			next = time.Now().Add(5 * time.Second)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d topics listed at the node under test: %w", n, m.N, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// linkGauges are a node's link gauges, summed over its links.
type linkGauges struct{ streams, waiting, mirrored, up float64 }

func (g linkGauges) String() string {
	return fmt.Sprintf("%.0f links up, %.0f mirrored, %.0f streams open, %.0f waiting", g.up, g.mirrored, g.streams, g.waiting)
}

// waitParked waits until both nodes' links are up and mirror the N topics with no mirror
// stream open and none waiting for one: every mirror parked.
func (m idleMirrors) waitParked(ctx context.Context) error {
	next := time.Now().Add(5 * time.Second)
	for {
		hot, err1 := scrapeLinkGauges(ctx, idleHotMetrics)
		idle, err2 := scrapeLinkGauges(ctx, m.AddrB+":7490")
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		parked := func(g linkGauges) bool {
			return g.up >= 1 && g.mirrored >= float64(m.N) && g.streams == 0 && g.waiting == 0
		}
		if parked(hot) && parked(idle) {
			return nil
		}
		if time.Now().After(next) {
			fmt.Fprintf(os.Stderr, "\n  idle mirrored: node under test %v; idle region %v", hot, idle)
			next = time.Now().Add(5 * time.Second)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("mirrors not all parked: node under test %v; idle region %v: %w", hot, idle, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// hotGauges reads the node under test's link gauges (after the measured window: mirror
// streams the hot traffic opened would show here).
func (m idleMirrors) hotGauges() (linkGauges, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return scrapeLinkGauges(ctx, idleHotMetrics)
}

// scrapeLinkGauges reads a node's /metrics at addr and sums its mirror gauges over links.
func scrapeLinkGauges(ctx context.Context, addr string) (linkGauges, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/metrics", nil)
	if err != nil {
		return linkGauges{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return linkGauges{}, fmt.Errorf("metrics of %s: %w", addr, err)
	}
	defer resp.Body.Close()
	var g linkGauges
	targets := map[string]*float64{
		"quicmq_link_mirror_streams":  &g.streams,
		"quicmq_link_mirrors_waiting": &g.waiting,
		"quicmq_link_mirrored_topics": &g.mirrored,
		"quicmq_link_up":              &g.up,
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		dst := targets[name]
		if dst == nil {
			continue
		}
		fs := strings.Fields(line)
		v, err := strconv.ParseFloat(fs[len(fs)-1], 64)
		if err != nil {
			return linkGauges{}, fmt.Errorf("metrics of %s: %q: %w", addr, line, err)
		}
		*dst += v
	}
	if err := sc.Err(); err != nil {
		return linkGauges{}, fmt.Errorf("metrics of %s: %w", addr, err)
	}
	return g, nil
}

// printIdle prints a fanout run over idle mirrored topic counts: each count's
// figures (medians over repeats), then each count's over the same repeat's run without idle
// mirrored topics and, for a count of topics when the run has a mesh arm, over the mesh's
// (the hot topics' figures: goal within 10%).
func printIdle(rs []*runResult, losses []float64, systems []string, idles []idleArm) {
	fmt.Println("| loss | system | idle mirrored topics | p50 ms | p99 ms | p999 ms | longest stall ms | stalls > 50 ms | late % | missing | node RSS before the window MiB | node cpu-µs per record | idle node cpu-µs per record | both nodes cpu-µs per record | idle node CPU ms | idle set-up s | streams open after | load | repeats |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, loss := range losses {
		for _, sys := range systems {
			for _, n := range idles {
				g := pick(rs, func(r *runResult) bool { return r.System == sys && r.Loss == loss && r.Idle.arm() == n })
				if len(g) == 0 {
					continue
				}
				fmt.Printf("| %.1f%% | %s | %v | %v | %v | %v | %v | %v | %v | %v | %v | %v | %v | %v | %v | %v | %v | %v | %d |\n", loss*100, sys, n,
					field(g, func(r *runResult) float64 { return r.P50 }),
					field(g, func(r *runResult) float64 { return r.P99 }),
					field(g, func(r *runResult) float64 { return r.P999 }),
					field(g, func(r *runResult) float64 { return r.LongestStall }),
					field(g, func(r *runResult) float64 { return float64(r.Stalls) }),
					field(g, func(r *runResult) float64 { return 100 * r.Late }),
					field(g, func(r *runResult) float64 { return float64(r.Missing) }),
					field(g, func(r *runResult) float64 { return r.BrokerRSSStart }),
					field(g, func(r *runResult) float64 { return r.BrokerCPUus }),
					field(g, func(r *runResult) float64 { return r.IdleNodeCPUus }),
					field(g, bothNodesCPU),
					field(g, func(r *runResult) float64 { return r.IdleNodeCPUms }),
					field(g, func(r *runResult) float64 { return r.IdleSetupSeconds }),
					field(g, func(r *runResult) float64 { return r.IdleStreamsEnd }),
					field(g, func(r *runResult) float64 { return r.LoadAvg }), len(g))
			}
		}
	}
	fmt.Println()
	fmt.Println("| loss | system | idle mirrored topics | over | p50 | p99 (goal <= 1.10) | p999 | longest stall | late | node cpu-µs per record | both nodes cpu-µs per record | repeats |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, loss := range losses {
		for _, sys := range systems {
			for _, n := range idles {
				for _, base := range n.bases(idles) {
					cells := []string{}
					k := 0
					for _, f := range []func(*runResult) float64{
						func(r *runResult) float64 { return r.P50 },
						func(r *runResult) float64 { return r.P99 },
						func(r *runResult) float64 { return r.P999 },
						func(r *runResult) float64 { return r.LongestStall },
						func(r *runResult) float64 { return r.Late },
						func(r *runResult) float64 { return r.BrokerCPUus },
						bothNodesCPU,
					} {
						vs := idleRatios(rs, loss, sys, n, base, f)
						k = max(k, len(vs))
						if len(vs) == 0 {
							cells = append(cells, "-")
							continue
						}
						cells = append(cells, median(vs).String())
					}
					fmt.Printf("| %.1f%% | %s | %v | %v | %s | %d |\n", loss*100, sys, n, base, strings.Join(cells, " | "), k)
				}
			}
		}
	}
	fmt.Println("\nover: a count's figure over the same repeat's run with the count named (0: no idle region; mesh: the idle region's node and no topic), median (lowest-highest) over repeats")
}

// bothNodesCPU is the CPU of the node under test and of the idle region's node per record.
func bothNodesCPU(r *runResult) float64 { return r.BrokerCPUus + r.IdleNodeCPUus }

// idleRatios are, per repeat, f of the run with the idle arm n over f of the run with base
// (same loss rate, system and slow count).
func idleRatios(rs []*runResult, loss float64, sys string, n, base idleArm, f func(*runResult) float64) []float64 {
	var vs []float64
	for _, a := range rs {
		if a.System != sys || a.Loss != loss || a.Idle.arm() != n {
			continue
		}
		for _, b := range rs {
			if b.System == sys && b.Loss == loss && b.Idle.arm() == base && b.Repeat == a.Repeat && b.Slow == a.Slow && f(b) > 0 {
				vs = append(vs, f(a)/f(b))
			}
		}
	}
	return vs
}

// runTopics is the "topics" command: it creates N topics idle.tNNNNNN at the node listening
// on HOST:7400 by one publish each, as a run with --idle-mirrored does at the idle region, to
// measure by hand what they cost the nodes holding them (docs/benchmarks.md).
func runTopics(args []string) error {
	fs := flag.NewFlagSet("topics", flag.ExitOnError)
	host := fs.String("host", "127.0.0.1", "the node's host (it listens on port 7400)")
	ca := fs.String("ca", "", "the mesh's CA certificate (DIR/tls/ca.pem of the node that made it)")
	n := fs.Int("n", 10000, "topics to create")
	fs.Parse(args)
	ctx, cancel := context.WithTimeout(context.Background(), idleSetupTimeout)
	defer cancel()
	t0 := time.Now()
	if err := (idleMirrors{N: *n, AddrB: *host}).create(ctx, *ca); err != nil {
		return err
	}
	fmt.Printf("%d topics created at %s:7400 in %.1f s\n", *n, *host, time.Since(t0).Seconds())
	return nil
}
