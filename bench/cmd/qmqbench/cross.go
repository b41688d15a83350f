package main

// Scenario 6, cross-region: two regions in two network namespaces joined by one veth pair,
// loss on that pair only, one real `quicmq node` process per region. Region b mirrors every
// topic of region a (--mirror cross.>) over the one federation link; a publisher in a
// publishes to 100 topics at a fixed total rate with timestamps; a subscriber in b, on b's
// node over b's loopback (no loss on its path), reads the 100 mirrored topics. The same
// run is made with the link's mirrors on a stream each ("quicmq") and on one shared stream
// (--ablation-shared-link on both nodes: "ablation"), side by side, at each loss rate.
//
// Processes: this command (the host namespace) creates the namespaces, starts the nodes and
// three helpers of this binary: "crosspub" in a, "crosssub" in b and, with --delay,
// "crossrelay" in b (a lossy.Relay through which b's node dials a's: a advertises the
// relay's address). They talk over stdin/stdout, one line per step.

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"gonum.org/v1/plot/vg"

	"github.com/quicmq/quicmq/bench/lossy"
)

// crossModes are the two stream mappings of a federation link, named as the fan-out's
// systems so that the tables, ratios and plot colours are shared.
var crossModes = []string{"quicmq", "ablation"}

func crossTopic(i int) string { return fmt.Sprintf("cross.%03d", i) }

// runCrossCommand dispatches "cross" and its hidden helpers.
func runCrossCommand(cmd string, args []string) error {
	switch cmd {
	case "crosspub":
		return runCrossPub(args)
	case "crosssub":
		return runCrossSub(args)
	case "crossrelay":
		return runCrossRelay(args)
	}
	return runCross(args)
}

// runCross is the "cross" command.
func runCross(args []string) error {
	fs := flag.NewFlagSet("cross", flag.ExitOnError)
	var p runParams
	p.flags(fs)
	p.Rate, fs.Lookup("rate").DefValue = 2000, "2000"
	fs.Lookup("subs").Usage = "mirrored topics (one subscription each, on one subscriber connection in region b)"
	fs.Lookup("delay").Usage = "one-way delay added each way on the federation link by a userspace UDP relay (lossy.Relay) in region b"
	lossFlag := fs.String("loss", "0,1,2,5", "packet loss rates on the link in percent, comma-separated")
	modesFlag := fs.String("modes", strings.Join(crossModes, ","), "link stream mappings: quicmq (a stream per mirrored topic), ablation (one shared stream)")
	repeat := fs.Int("repeat", 1, "repetitions of the whole set (medians are reported)")
	out := fs.String("out", defaultOut, "directory for JSON results and PNG plots")
	bin := fs.String("quicmq", "", "the quicmq binary (default: built from ./cmd/quicmq, run from the repository root)")
	fs.Parse(args)
	if p.Profile != "" || p.LossPath != "all" {
		return errors.New("--profile and --loss-path are fan-out flags: the loss here is on the federation link only")
	}
	if err := lossy.Check(); err != nil {
		return fmt.Errorf("%w; this scenario needs the lossy-network harness and is skipped", err)
	}
	if stale, _ := lossy.RemoveStale(); len(stale) > 0 {
		fmt.Fprintf(os.Stderr, "removed namespaces left by killed runs: %v\n", stale)
	}
	losses, err := parsePercents(*lossFlag)
	if err != nil {
		return fmt.Errorf("--loss: %w", err)
	}
	modes := strings.Split(*modesFlag, ",")
	for _, m := range modes {
		if m != "quicmq" && m != "ablation" {
			return fmt.Errorf("--modes: %q is neither quicmq nor ablation", m)
		}
	}
	if *bin == "" {
		b, cleanup, err := buildQuicmq(".")
		if err != nil {
			return err
		}
		defer cleanup()
		*bin = b
	}
	stop := lossy.CleanupOnSignal(killCrossProcs)
	defer stop()

	var results []*crossResult
	total := *repeat * len(losses) * len(modes)
	started := time.Now()
	for r := 1; r <= *repeat; r++ {
		for _, loss := range losses {
			for _, mode := range modes {
				q := p
				q.System, q.Loss, q.LossPath = mode, loss, "link"
				fmt.Fprintf(os.Stderr, "[%d/%d %s] repeat %d: %s, loss %.1f%% ...",
					len(results)+1, total, time.Since(started).Round(time.Second), r, mode, loss*100)
				res, err := crossOnce(*bin, q)
				if err != nil {
					fmt.Fprintf(os.Stderr, " failed: %v\n", err)
					continue
				}
				res.Repeat = r
				fmt.Fprintf(os.Stderr, " p50 %.1f p99 %.1f p999 %.1f ms, longest stall %.0f ms, %d stalls>50ms, missing %d, %d packets dropped\n",
					res.P50, res.P99, res.P999, res.LongestStall, res.Stalls, res.Missing, res.DroppedPackets)
				results = append(results, res)
			}
		}
	}
	jsonPath, err := saveResults(*out, "cross", results)
	if err != nil {
		return err
	}
	rs := make([]*runResult, len(results))
	for i, r := range results {
		rs[i] = r.runResult
	}
	printCross(results, rs, losses, modes)
	plots, err := plotCross(rs, strings.TrimSuffix(jsonPath, ".json"), losses, modes)
	for _, f := range plots {
		fmt.Fprintf(os.Stderr, "plot: %s\n", f)
	}
	if len(results) < total {
		return fmt.Errorf("%d of %d runs failed", total-len(results), total)
	}
	return err
}

// crossProcs holds every child process running, for killCrossProcs on SIGINT.
var crossProcs struct {
	sync.Mutex
	m map[*exec.Cmd]struct{}
}

var (
	nodeListeningRE = regexp.MustCompile(`msg="node listening".* ca=(\S+)`)
	nodeLinkUpRE    = regexp.MustCompile(`msg="link up"`)
)

// crossResult is one run: the fan-out's figures, and what crossed the link.
type crossResult struct {
	*runResult
	Published int       // records published from GO to the window's end (warm-up included)
	LinkAB    linkCount // packets region b received over the link (records, after the loss rule)
	LinkBA    linkCount // packets region a received over the link (acknowledgements)
}

type linkCount struct{ Packets, Bytes int64 }

// countLink adds an nftables counter of the packets that arrive in ns over ifname and pass
// the loss rule (a chain of its own, after the harness's).
func countLink(ns *lossy.Namespace, ifname string) error {
	cmd := exec.Command("ip", "netns", "exec", ns.Name, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(fmt.Sprintf("add table inet x6count\nadd chain inet x6count in { type filter hook input priority 10; policy accept; }\nflush chain inet x6count in\nadd rule inet x6count in iifname %q counter\n", ifname))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft counter in %s: %w: %s", ns.Name, err, out)
	}
	return nil
}

func readLinkCount(ns *lossy.Namespace) linkCount {
	out, _ := exec.Command("ip", "netns", "exec", ns.Name, "nft", "list", "chain", "inet", "x6count", "in").CombinedOutput()
	var c linkCount
	if i := strings.Index(string(out), "counter packets "); i >= 0 {
		fmt.Sscanf(string(out[i:]), "counter packets %d bytes %d", &c.Packets, &c.Bytes)
	}
	return c
}

// crossWindow is what the publisher reports and the subscriber is told: the measured
// window and how many of its records each topic got.
type crossWindow struct {
	WinStart, WinEnd int64 // unix ns
	SentPerSub       []int
	Sent             int
	Published        int // every timestamped record, warm-up of the window included
	Drain            time.Duration
	Notes            []string
}

// crossOnce runs one measurement: fresh namespaces, nodes and helpers.
func crossOnce(bin string, p runParams) (*crossResult, error) {
	nsA, err := lossy.New("x6a")
	if err != nil {
		return nil, err
	}
	defer nsA.Close()
	nsB, err := lossy.New("x6b")
	if err != nil {
		return nil, err
	}
	defer nsB.Close()
	link, err := lossy.Connect(nsA, nsB)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "qmqbench-cross-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	c := &crossRun{p: p, nsA: nsA, nsB: nsB, link: link, tmp: tmp, self: self}
	defer c.stop()
	setupStart := time.Now()
	nodeB, caFile, err := c.startNodes(bin)
	if err != nil {
		return nil, err
	}
	pub, sub, err := c.startClients(caFile)
	if err != nil {
		return nil, err
	}
	// Loss on the link only: packets arriving over the veth pair, in both namespaces.
	for _, ns := range []*lossy.Namespace{nsA, nsB} {
		ifname, err := vethOf(ns)
		if err != nil {
			return nil, err
		}
		if err := ns.SetLossMatch(p.Loss, fmt.Sprintf("iifname %q", ifname)); err != nil {
			return nil, err
		}
		if err := countLink(ns, ifname); err != nil {
			return nil, err
		}
	}
	res := &runResult{runParams: p, SetupSeconds: time.Since(setupStart).Seconds()}
	res.BrokerRSSStart = rssMiB(nodeB.cmd.Process.Pid)
	win, got, err := c.measure(pub, sub)
	if err != nil {
		return nil, err
	}
	res.BrokerRSSEnd = rssMiB(nodeB.cmd.Process.Pid)
	res.LoadAvg = loadAvg()
	cr := &crossResult{runResult: res, Published: win.Published, LinkAB: readLinkCount(nsB), LinkBA: readLinkCount(nsA)}
	for _, ns := range []*lossy.Namespace{nsA, nsB} {
		d, _ := ns.Dropped()
		res.DroppedPackets += d
		ns.SetLoss(0)
	}
	res.Sent, res.Notes = win.Sent, win.Notes
	res.PubRate = float64(win.Sent) / p.Duration.Seconds()
	samples := make([][]sample, p.Subs)
	for i := range samples {
		if i < len(got) {
			for _, s := range got[i] {
				samples[i] = append(samples[i], sample{s[0], s[1]})
			}
		}
	}
	if len(win.SentPerSub) != p.Subs {
		return nil, fmt.Errorf("crosspub reported %d topics, want %d", len(win.SentPerSub), p.Subs)
	}
	analyse(res, samples, win.SentPerSub, time.Unix(0, win.WinStart), time.Unix(0, win.WinEnd))
	return cr, nil
}

// crossRun is one run of the cross-region scenario: its two namespaces and the processes
// started in them, stopped in reverse order (helpers first, nodes last).
type crossRun struct {
	p         runParams
	nsA, nsB  *lossy.Namespace
	link      *lossy.Link
	tmp, self string // the run's directory; this binary, which runs the helpers
	procs     []*proc
}

func (c *crossRun) start(ns *lossy.Namespace, name, bin string, watch []*regexp.Regexp, args ...string) (*proc, error) {
	pr, err := startProc(ns, name, bin, watch, args...)
	if err == nil {
		c.procs = append(c.procs, pr)
	}
	return pr, err
}

func (c *crossRun) stop() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		grace := 10 * time.Second
		if strings.HasPrefix(c.procs[i].name, "node ") {
			grace = 0
		}
		c.procs[i].stop(grace)
	}
}

// startNodes starts node a1 (region a, in nsA, advertised through the delay relay when
// there is one) and node b1 (region b, in nsB, mirroring cross.>), and waits for b1's link.
// It returns b1 and the CA file a1 made.
func (c *crossRun) startNodes(bin string) (nodeB *proc, caFile string, err error) {
	p, link := c.p, c.link
	advertise := link.AddrA + ":7400"
	if p.Delay > 0 {
		relay, err := c.start(c.nsB, "relay", c.self, nil, "crossrelay", "--upstream", advertise, "--delay", p.Delay.String())
		if err != nil {
			return nil, "", err
		}
		if advertise, err = relay.line(10 * time.Second); err != nil {
			return nil, "", err
		}
	}
	caDir := filepath.Join(c.tmp, "ca")
	nodeArgs := func(name, region, ip string) []string {
		a := []string{"node", "--anonymous", "--insecure-gossip", "--name", name, "--region", region,
			"--listen", ip + ":7400", "--gossip", ip + ":7500", "--wan", ip + ":7600",
			"--data", filepath.Join(c.tmp, name), "--ca-dir", caDir}
		if p.System == "ablation" {
			a = append(a, "--ablation-shared-link")
		}
		return a
	}
	watch := []*regexp.Regexp{nodeListeningRE, nodeLinkUpRE}
	nodeA, err := c.start(c.nsA, "node a1", bin, watch, append(nodeArgs("a1", "a", link.AddrA), "--advertise", advertise)...)
	if err != nil {
		return nil, "", err
	}
	m, err := nodeA.waitMatch(nodeListeningRE, 30*time.Second)
	if err != nil {
		return nil, "", err
	}
	nodeB, err = c.start(c.nsB, "node b1", bin, watch, append(nodeArgs("b1", "b", link.AddrB),
		"--wan-join", link.AddrA+":7600", "--mirror", "cross.>")...)
	if err != nil {
		return nil, "", err
	}
	if _, err := nodeB.waitMatch(nodeLinkUpRE, 30*time.Second); err != nil {
		return nil, "", err
	}
	return nodeB, m[1], nil
}

// startClients starts the publisher in nsA and the subscriber in nsB, and waits until the
// publisher has warmed every topic up and the subscriber has its warm-up records mirrored.
func (c *crossRun) startClients(caFile string) (pub, sub *proc, err error) {
	p := c.p
	common := []string{"--ca", caFile, "--subs", strconv.Itoa(p.Subs)}
	pub, err = c.start(c.nsA, "crosspub", c.self, nil, append([]string{"crosspub", "--addr", c.link.AddrA + ":7400",
		"--rate", strconv.Itoa(p.Rate), "--size", strconv.Itoa(p.Size),
		"--warmup", p.Warmup.String(), "--duration", p.Duration.String()}, common...)...)
	if err != nil {
		return nil, nil, err
	}
	if l, err := pub.line(60 * time.Second); err != nil || l != "WARM" {
		return nil, nil, fmt.Errorf("crosspub: %q %v", l, err)
	}
	sub, err = c.start(c.nsB, "crosssub", c.self, nil, append([]string{"crosssub", "--addr", c.link.AddrB + ":7400"}, common...)...)
	if err != nil {
		return nil, nil, err
	}
	if l, err := sub.line(60 * time.Second); err != nil || l != "READY" {
		return nil, nil, fmt.Errorf("crosssub (waiting for every topic's warm-up record to be mirrored): %q %v", l, err)
	}
	return pub, sub, nil
}

// measure starts the publisher, hands its window to the subscriber, and returns the window
// and, per topic, the (sent, received) times of the records the subscriber got.
func (c *crossRun) measure(pub, sub *proc) (crossWindow, [][][2]int64, error) {
	p := c.p
	var win crossWindow
	fmt.Fprintln(pub.stdin, "GO")
	l, err := pub.line(p.Warmup + p.Duration + p.Drain + 30*time.Second)
	if err != nil {
		return win, nil, err
	}
	if err := json.Unmarshal([]byte(l), &win); err != nil {
		return win, nil, fmt.Errorf("crosspub output: %w", err)
	}
	win.Drain = p.Drain
	wb, _ := json.Marshal(win)
	fmt.Fprintf(sub.stdin, "%s\n", wb)
	if l, err = sub.line(p.Drain + 30*time.Second); err != nil {
		return win, nil, err
	}
	var got [][][2]int64
	if err := json.Unmarshal([]byte(l), &got); err != nil {
		return win, nil, fmt.Errorf("crosssub output: %w", err)
	}
	return win, got, nil
}

func printCross(crs []*crossResult, rs []*runResult, losses []float64, modes []string) {
	fmt.Println("| loss | link mapping | p50 ms | p99 ms | p999 ms | longest stall ms | median topic's longest stall ms | stalls > 50 ms | topics stalled > 50 ms | missing | packets dropped |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	for _, loss := range losses {
		for _, mode := range modes {
			g := pick(rs, func(r *runResult) bool { return r.System == mode && r.Loss == loss })
			if len(g) == 0 {
				continue
			}
			fmt.Printf("| %.1f%% | %s | %v | %v | %v | %v | %v | %v | %v | %v | %v |\n", loss*100, crossLabel(mode),
				field(g, func(r *runResult) float64 { return r.P50 }),
				field(g, func(r *runResult) float64 { return r.P99 }),
				field(g, func(r *runResult) float64 { return r.P999 }),
				field(g, func(r *runResult) float64 { return r.LongestStall }),
				field(g, func(r *runResult) float64 { return r.MedianLongest }),
				field(g, func(r *runResult) float64 { return float64(r.Stalls) }),
				field(g, func(r *runResult) float64 { return float64(r.SubsStalled) }),
				field(g, func(r *runResult) float64 { return float64(r.Missing) }),
				field(g, func(r *runResult) float64 { return float64(r.DroppedPackets) }))
		}
	}
	fmt.Println()
	fmt.Println("| loss | p50 stream/shared | p99 stream/shared | p999 stream/shared | longest stall stream/shared | stalls > 50 ms stream/shared |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, loss := range losses {
		var cells []string
		for _, f := range []func(*runResult) float64{
			func(r *runResult) float64 { return r.P50 },
			func(r *runResult) float64 { return r.P99 },
			func(r *runResult) float64 { return r.P999 },
			func(r *runResult) float64 { return r.LongestStall },
			func(r *runResult) float64 { return float64(r.Stalls) },
		} {
			if s, ok := ratio(rs, loss, "quicmq", "ablation", f); ok {
				cells = append(cells, s.String())
			} else {
				cells = append(cells, "-")
			}
		}
		fmt.Printf("| %.1f%% | %s |\n", loss*100, strings.Join(cells, " | "))
	}
	fmt.Println()
	fmt.Println("| loss | link mapping | packets a->b per record | bytes a->b per record | packets b->a per record | load avg |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, loss := range losses {
		for _, mode := range modes {
			var g []*crossResult
			for _, r := range crs {
				if r.System == mode && r.Loss == loss && r.Published > 0 {
					g = append(g, r)
				}
			}
			if len(g) == 0 {
				continue
			}
			per := func(f func(*crossResult) int64) stat {
				var vs []float64
				for _, r := range g {
					vs = append(vs, float64(f(r))/float64(r.Published))
				}
				return median(vs)
			}
			var loads []float64
			for _, r := range g {
				loads = append(loads, r.LoadAvg)
			}
			fmt.Printf("| %.1f%% | %s | %v | %v | %v | %v |\n", loss*100, crossLabel(mode),
				per(func(r *crossResult) int64 { return r.LinkAB.Packets }),
				per(func(r *crossResult) int64 { return r.LinkAB.Bytes }),
				per(func(r *crossResult) int64 { return r.LinkBA.Packets }),
				median(loads))
		}
	}
}

func crossLabel(mode string) string {
	if mode == "ablation" {
		return "one shared stream (ablation)"
	}
	return "stream per mirrored topic"
}

// plotCross draws, per loss rate, the latency tails of both mappings and (above 0%) their
// per-topic stall timelines.
func plotCross(rs []*runResult, prefix string, losses []float64, modes []string) ([]string, error) {
	var files []string
	for _, loss := range losses {
		var reps []*runResult
		title := fmt.Sprintf("cross-region, %.1f%% loss on the link: latency tail (100 mirrored topics)", loss*100)
		if len(rs) > 0 && rs[0].Delay > 0 {
			title = fmt.Sprintf("cross-region, %.1f%% loss, +%v each way: latency tail (%d mirrored topics)", loss*100, rs[0].Delay, rs[0].Subs)
		}
		p := tailPlot(title)
		for _, mode := range modes {
			r := representative(pick(rs, func(r *runResult) bool { return r.System == mode && r.Loss == loss }))
			if r == nil {
				continue
			}
			reps = append(reps, r)
			if err := addTail(p, r, crossLabel(mode), false); err != nil {
				return files, err
			}
		}
		if len(reps) == 0 {
			continue
		}
		f := fmt.Sprintf("%s-latency-loss%.1f.png", prefix, loss*100)
		if err := p.Save(7*vg.Inch, 4.5*vg.Inch, f); err != nil {
			return files, err
		}
		files = append(files, f)
		if loss > 0 {
			f := fmt.Sprintf("%s-stalls-loss%.1f.png", prefix, loss*100)
			if err := stallTimeline(reps, fmt.Sprintf("%.1f%% loss on the link", loss*100), f); err != nil {
				return files, err
			}
			files = append(files, f)
		}
	}
	return files, nil
}
