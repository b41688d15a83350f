package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/quicmq/quicmq/bench/lossy"
)

// runFanout is scenarios 1 (fan-out under loss) and 2 (slow consumer: no loss, one
// subscription stops reading, against a baseline without it in the same invocation).
func runFanout(args []string, slow bool) error {
	name := "fanout"
	if slow {
		name = "slow"
	}
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	var p runParams
	p.flags(fs)
	lossFlag := fs.String("loss", "0,0.5,1,2,5", "packet loss rates in percent, comma-separated")
	systemsFlag := fs.String("systems", strings.Join(systemNames, ","), "systems, comma-separated: "+strings.Join(systemNames, ","))
	repeat := fs.Int("repeat", 1, "repetitions of the whole set (medians are reported)")
	out := fs.String("out", defaultOut, "directory for JSON results and PNG plots")
	idleFlag := fs.String("idle-mirrored", "0", "idle mirrored topics beside the hot ones, counts comma-separated (e.g. 0,10000): each repeat runs each system with each count, alternating; above 0 a second region's node creates that many topics, mirrored into the node under test and parked before the window (QuicMQ only; issue 34, idlemirror.go)")
	idleSettle := fs.Duration("idle-settle", 30*time.Second, "with idle mirrored topics: how long they stay idle, every mirror parked, before the window (the catch-up's garbage collected and its writes compacted)")
	fs.Parse(args)
	idles, err := parseIdleCounts(*idleFlag)
	if err != nil {
		return fmt.Errorf("--idle-mirrored: %w", err)
	}
	if p.WindowProfile, err = profileDir(p.WindowProfile); err != nil {
		return err
	}
	systems := strings.Split(*systemsFlag, ",")
	if err := checkIdleSystems(idles, systems); err != nil {
		return err
	}
	if slow && (len(idles) > 1 || idles[0].Mesh) {
		return errors.New("--idle-mirrored: for the loss scenarios (fanout, hetero), not slow")
	}
	if err := lossy.Check(); err != nil {
		return fmt.Errorf("%w; this scenario needs the lossy-network harness and is skipped", err)
	}
	if stale, _ := lossy.RemoveStale(); len(stale) > 0 {
		fmt.Fprintf(os.Stderr, "removed namespaces left by killed runs: %v\n", stale)
	}
	losses := []float64{0}
	if !slow {
		if losses, err = parsePercents(*lossFlag); err != nil {
			return fmt.Errorf("--loss: %w", err)
		}
	}
	slows := []int{0}
	if slow {
		slows = []int{0, 1}
	}

	slot, stop := killOnSignal()
	defer stop()

	plan := fanoutPlan{repeat: *repeat, losses: losses, systems: systems, idles: idles, slows: slows, idleSettle: *idleSettle, slow: slow}
	results := plan.run(p, slot)
	shareLateThresholds(results)
	jsonPath, err := saveResults(*out, name, results)
	if err != nil {
		return err
	}
	if len(idles) > 1 || idles[0].Mesh {
		// The tables and plots below group by system: these runs differ in another dimension.
		printIdle(results, losses, systems, idles)
		return nil
	}
	if slow {
		printSlow(results, systems)
	} else {
		printFanout(results, losses, systems)
		printLate(results, losses, systems)
	}
	plots, err := plotAll(results, strings.TrimSuffix(jsonPath, ".json"), losses, systems, slow)
	for _, f := range plots {
		fmt.Fprintf(os.Stderr, "plot: %s\n", f)
	}
	return err
}

// profileDir makes --window-profile's directory dir absolute (the worker runs elsewhere) and
// creates it; "" stays "".
func profileDir(dir string) (string, error) {
	if dir == "" {
		return "", nil
	}
	dir, err := filepath.Abs(dir)
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		return "", fmt.Errorf("--window-profile: %w", err)
	}
	return dir, nil
}

// fanoutPlan is what one invocation of fanout or slow runs: every repeat runs each loss
// rate, system, count of idle mirrored topics (in alternating order: idleOrder) and slow
// setting, one after another.
type fanoutPlan struct {
	repeat     int
	losses     []float64
	systems    []string
	idles      []idleArm
	slows      []int
	idleSettle time.Duration
	slow       bool
}

// run runs the plan's measurements with progress on stderr; a failed one is reported and
// left out.
func (pl fanoutPlan) run(p runParams, slot *workerSlot) []*runResult {
	var results []*runResult
	total := pl.repeat * len(pl.losses) * len(pl.systems) * len(pl.idles) * len(pl.slows)
	started := time.Now()
	for r := 1; r <= pl.repeat; r++ {
		for _, loss := range pl.losses {
			for _, sys := range pl.systems {
				for _, idle := range idleOrder(pl.idles, r) {
					for _, sl := range pl.slows {
						q := p
						q.System, q.Loss, q.Slow = sys, loss, sl
						q.Idle.set(idle)
						q.Idle.Settle = pl.idleSettle
						q.ProfileName = fmt.Sprintf("%s-loss%.1f-idle%v-r%d", sys, loss*100, idle, r)
						if pl.slow {
							q.Wild = 1 // the subscription that stalls takes every topic
						}
						what := ""
						if idle.Mesh {
							what = fmt.Sprintf(", %d idle mirrored topics (idle region's node running)", idle.N)
						}
						fmt.Fprintf(os.Stderr, "[%d/%d %s] repeat %d: %s, loss %.1f%%, slow %d%s ...",
							len(results)+1, total, time.Since(started).Round(time.Second), r, sys, loss*100, sl, what)
						res, err := runInNamespace(q, slot)
						if err != nil {
							fmt.Fprintf(os.Stderr, " failed: %v\n", err)
							continue
						}
						res.Repeat = r
						fmt.Fprintf(os.Stderr, " p50 %.2f p99 %.1f p999 %.1f ms, longest stall %.0f ms, %d stalls>50ms, missing %d, load %.1f\n",
							res.P50, res.P99, res.P999, res.LongestStall, res.Stalls, res.Missing, res.LoadAvg)
						results = append(results, res)
					}
				}
			}
		}
	}
	return results
}

// runInNamespace runs one fan-out measurement in a fresh namespace.
func runInNamespace(p runParams, slot *workerSlot) (*runResult, error) {
	var res runResult
	budget := p.Warmup + p.Duration + 3*p.Drain + 2*time.Minute
	if p.Idle.on() {
		budget += idleSetupTimeout
	}
	closeIdle := func() {}
	defer func() { closeIdle() }()
	err := workerInNS(p.System, budget, func(ns *lossy.Namespace) ([]string, error) {
		p.NS = ns.Name
		if p.Idle.on() {
			idle, closeNS, err := idlePeerNet(ns, p.Idle)
			if err != nil {
				return nil, err
			}
			p.Idle, closeIdle = idle, closeNS
		}
		return append([]string{"worker"}, p.args()...), nil
	}, &res, slot)
	if err != nil {
		return nil, err
	}
	return &res, nil
}

// workerSlot is the worker process of the run in progress, which SIGINT or SIGTERM kills with
// its process group before the namespaces are removed.
type workerSlot struct {
	mu  sync.Mutex
	cmd *exec.Cmd
}

// killOnSignal returns an empty slot watched by lossy.CleanupOnSignal, and the function that
// stops watching.
func killOnSignal() (*workerSlot, func()) {
	w := &workerSlot{}
	stop := lossy.CleanupOnSignal(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.cmd != nil && w.cmd.Process != nil {
			syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
		}
	})
	return w, stop
}

func (w *workerSlot) set(cmd *exec.Cmd) {
	w.mu.Lock()
	w.cmd = cmd
	w.mu.Unlock()
}

// workerIn creates a namespace, runs this binary inside it with the arguments args returns
// for the namespace's name, decodes its JSON output into out and removes the namespace.
func workerIn(tag string, budget time.Duration, args func(ns string) []string, out any, slot *workerSlot) error {
	return workerInNS(tag, budget, func(ns *lossy.Namespace) ([]string, error) { return args(ns.Name), nil }, out, slot)
}

// workerInNS is workerIn whose args may set up more around the namespace first (and fail).
func workerInNS(tag string, budget time.Duration, args func(ns *lossy.Namespace) ([]string, error), out any, slot *workerSlot) error {
	ns, err := lossy.New(tag)
	if err != nil {
		return err
	}
	defer ns.Close()
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	a, err := args(ns)
	if err != nil {
		return err
	}
	cmd := ns.Command(ctx, self, a...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = os.Stderr
	slot.set(cmd)
	err = cmd.Run()
	slot.set(nil)
	if err != nil {
		return fmt.Errorf("%s: %w", a[0], err)
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		return fmt.Errorf("%s output: %w", a[0], err)
	}
	return nil
}

// stat is a median with the lowest and highest of the repeats.
type stat struct{ med, lo, hi float64 }

func (s stat) String() string {
	if s.lo == s.hi {
		return fmtNum(s.med)
	}
	return fmt.Sprintf("%s (%s-%s)", fmtNum(s.med), fmtNum(s.lo), fmtNum(s.hi))
}

func fmtNum(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func median(vs []float64) stat {
	if len(vs) == 0 {
		return stat{}
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + m) / 2
	}
	return stat{m, s[0], s[len(s)-1]}
}

func pick(rs []*runResult, f func(*runResult) bool) []*runResult {
	var out []*runResult
	for _, r := range rs {
		if f(r) {
			out = append(out, r)
		}
	}
	return out
}

func field(rs []*runResult, f func(*runResult) float64) stat {
	var vs []float64
	for _, r := range rs {
		vs = append(vs, f(r))
	}
	return median(vs)
}

// ratio is the median over repeats of a/b, both from the same repeat and loss.
func ratio(rs []*runResult, loss float64, a, b string, f func(*runResult) float64) (stat, bool) {
	var vs []float64
	for _, ra := range rs {
		if ra.System != a || ra.Loss != loss || ra.Slow != 0 {
			continue
		}
		for _, rb := range rs {
			if rb.System == b && rb.Loss == loss && rb.Repeat == ra.Repeat && rb.Slow == 0 && f(rb) > 0 {
				vs = append(vs, f(ra)/f(rb))
			}
		}
	}
	return median(vs), len(vs) > 0
}

func printFanout(rs []*runResult, losses []float64, systems []string) {
	fmt.Println("| loss | system | p50 ms | p99 ms | p999 ms | longest stall ms | median sub's longest stall ms | stalls > 50 ms | missing |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, loss := range losses {
		for _, sys := range systems {
			g := pick(rs, func(r *runResult) bool { return r.System == sys && r.Loss == loss })
			if len(g) == 0 {
				continue
			}
			fmt.Printf("| %.1f%% | %s | %v | %v | %v | %v | %v | %v | %v |\n", loss*100, sys,
				field(g, func(r *runResult) float64 { return r.P50 }),
				field(g, func(r *runResult) float64 { return r.P99 }),
				field(g, func(r *runResult) float64 { return r.P999 }),
				field(g, func(r *runResult) float64 { return r.LongestStall }),
				field(g, func(r *runResult) float64 { return r.MedianLongest }),
				field(g, func(r *runResult) float64 { return float64(r.Stalls) }),
				field(g, func(r *runResult) float64 { return float64(r.Missing) }))
		}
	}
	fmt.Println()
	fmt.Println("| loss | p99 quicmq/ablation | p999 quicmq/ablation | longest stall quicmq/ablation | p99 quicmq/nats | p999 quicmq/nats |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, loss := range losses {
		cells := []string{}
		for _, c := range []struct {
			b string
			f func(*runResult) float64
		}{
			{"ablation", func(r *runResult) float64 { return r.P99 }},
			{"ablation", func(r *runResult) float64 { return r.P999 }},
			{"ablation", func(r *runResult) float64 { return r.LongestStall }},
			{"nats", func(r *runResult) float64 { return r.P99 }},
			{"nats", func(r *runResult) float64 { return r.P999 }},
		} {
			if s, ok := ratio(rs, loss, "quicmq", c.b, c.f); ok {
				cells = append(cells, s.String())
			} else {
				cells = append(cells, "-")
			}
		}
		fmt.Printf("| %.1f%% | %s |\n", loss*100, strings.Join(cells, " | "))
	}
}

func printSlow(rs []*runResult, systems []string) {
	fmt.Println("| system | slow consumer | others' p50 ms | others' p99 ms | others' p999 ms | longest stall ms | missing | publish rate/s | broker RSS start/max/end MiB | client RSS max MiB | records the slow one took | notes |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, sys := range systems {
		for _, sl := range []int{0, 1} {
			g := pick(rs, func(r *runResult) bool { return r.System == sys && r.Slow == sl })
			if len(g) == 0 {
				continue
			}
			notes := ""
			if len(g[0].Notes) > 0 {
				notes = strings.Join(g[0].Notes, "; ")
				if len(notes) > 200 {
					notes = notes[:200] + "..."
				}
			}
			fmt.Printf("| %s | %v | %v | %v | %v | %v | %v | %v | %v / %v / %v | %v | %v | %s |\n", sys, sl == 1,
				field(g, func(r *runResult) float64 { return r.P50 }),
				field(g, func(r *runResult) float64 { return r.P99 }),
				field(g, func(r *runResult) float64 { return r.P999 }),
				field(g, func(r *runResult) float64 { return r.LongestStall }),
				field(g, func(r *runResult) float64 { return float64(r.Missing) }),
				field(g, func(r *runResult) float64 { return r.PubRate }),
				field(g, func(r *runResult) float64 { return r.BrokerRSSStart }),
				field(g, func(r *runResult) float64 { return r.BrokerRSSMax }),
				field(g, func(r *runResult) float64 { return r.BrokerRSSEnd }),
				field(g, func(r *runResult) float64 { return r.ClientRSSMax }),
				field(g, func(r *runResult) float64 { return float64(r.SlowReceived) }),
				notes)
		}
	}
}

// runReport is the "report" command: tables and plots again from a fan-out or slow
// JSON file (e.g. after changing the plots).
func runReport(args []string) error {
	fs := flag.NewFlagSet("report", flag.ExitOnError)
	out := fs.String("out", "", "directory for the plots (default: the JSON file's)")
	fs.Parse(args)
	if fs.NArg() != 1 {
		return fmt.Errorf("usage: qmqbench report [--out DIR] FILE.json")
	}
	file := fs.Arg(0)
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	if *out == "" {
		*out = filepath.Dir(file)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	name := strings.TrimSuffix(filepath.Base(file), ".json")
	if strings.HasPrefix(name, "truefanout-") {
		var tf []*tfResult
		if err := json.Unmarshal(b, &tf); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		printTrueFanout(tf, systemsOfTF(tf))
		png := filepath.Join(*out, name+".png")
		if err := plotTrueFanout(tf, png); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "plot: %s\n", png)
		return nil
	}
	var rs []*runResult
	if err := json.Unmarshal(b, &rs); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	var losses []float64
	var systems []string
	slow := false
	for _, r := range rs {
		if !slices.Contains(losses, r.Loss) {
			losses = append(losses, r.Loss)
		}
		if !slices.Contains(systems, r.System) {
			systems = append(systems, r.System)
		}
		slow = slow || r.Slow > 0 || r.Wild > 0
	}
	if slow {
		printSlow(rs, systems)
	} else {
		printFanout(rs, losses, systems)
		shareLateThresholds(rs)
		printLate(rs, losses, systems)
	}
	plots, err := plotAll(rs, filepath.Join(*out, name+"-report"), losses, systems, slow)
	for _, f := range plots {
		fmt.Fprintf(os.Stderr, "plot: %s\n", f)
	}
	return err
}
