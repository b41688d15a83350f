package main

// The true fan-out scenario of issue 15: ONE topic, S subscriptions spread evenly over C
// subscriber connections, a publish rate that rises in steps, for QuicMQ, NATS core and
// JetStream. For each (system, S, C): the highest rate of deliveries per second held with the
// p99 delivery latency under a limit (50 ms), and the broker process's CPU per delivery.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quicmq/quicmq/bench/lossy"
)

// pubShare is the share of a step's publish rate below which the publisher, not the
// subscriptions, broke the step (its window of unacknowledged publishes stayed full). Lower
// than --min-share: a wake-up of the pacing loop that comes late on a loaded machine stretches
// a step by tens of milliseconds without anything blocking.
const pubShare = 0.9

type tfParams struct {
	System string
	Subs   int
	Conns  int
	Size   int
	// Start is the first step's deliveries per second (publish rate x Subs); each step
	// multiplies it by Factor, up to Max.
	Start, Factor, Max float64
	Step               time.Duration // publishing per step
	Drain              time.Duration // longest wait after a step for its records
	P99Limit           float64       // ms: a step whose p99 is above it breaks
	MinShare           float64       // a step whose deliveries are below this share of Subs x published breaks
	Retries            int           // a broken step is run again this many times before the run stops
	Profile            string        `json:",omitempty"` // a directory for CPU profiles of the broker and of the clients' process
}

func (p *tfParams) flags(fs *flag.FlagSet) {
	fs.IntVar(&p.Size, "size", 128, "payload bytes (at least 17: send time, sequence, step)")
	fs.Float64Var(&p.Start, "start", 10000, "first step's target deliveries per second (publish rate x subscriptions)")
	fs.Float64Var(&p.Factor, "factor", 2, "each step's target is the last one's times this (> 1)")
	fs.Float64Var(&p.Max, "max", 4e6, "highest target deliveries per second tried")
	fs.DurationVar(&p.Step, "step", 3*time.Second, "publishing per step")
	fs.DurationVar(&p.Drain, "drain", 3*time.Second, "longest wait after a step for its records (a record not in by then counts as lost)")
	fs.Float64Var(&p.P99Limit, "p99", 50, "p99 delivery latency limit in ms: a step above it breaks")
	fs.IntVar(&p.Retries, "retries", 1, "a broken step is run again this many times (same target) before the run stops: one fsync stall on a shared disk can break a 50 ms p99 once")
	fs.StringVar(&p.Profile, "profile", "", "directory for CPU profiles of each run's broker (truefanout-SYSTEM-sS-cC.pprof) and clients' process (...-clients.pprof), over their whole life (with --start = --max, mostly that one step)")
	fs.Float64Var(&p.MinShare, "min-share", 0.98, "a step breaks when fewer than this share of its deliveries arrive (or when the publisher reaches less than 90% of the target rate: its window is full)")
}

func (p tfParams) args() []string {
	return []string{"tfworker", "--system", p.System, "--subs", fmt.Sprint(p.Subs), "--conns", fmt.Sprint(p.Conns),
		"--size", fmt.Sprint(p.Size), "--start", fmt.Sprint(p.Start), "--factor", fmt.Sprint(p.Factor),
		"--max", fmt.Sprint(p.Max), "--step", p.Step.String(), "--drain", p.Drain.String(),
		"--p99", fmt.Sprint(p.P99Limit), "--min-share", fmt.Sprint(p.MinShare), "--retries", fmt.Sprint(p.Retries), "--profile", p.Profile}
}

func (p tfParams) validate() error {
	switch {
	case p.Subs < 1 || p.Conns < 1 || p.Conns > p.Subs:
		return fmt.Errorf("%d subscriptions over %d connections: want 1 <= connections <= subscriptions", p.Subs, p.Conns)
	case p.Start <= 0 || p.Factor <= 1 || p.Max < p.Start:
		return fmt.Errorf("--start %v --factor %v --max %v: want start > 0, factor > 1, max >= start", p.Start, p.Factor, p.Max)
	case p.Step <= 0 || p.P99Limit <= 0 || p.MinShare <= 0 || p.MinShare > 1 || p.Retries < 0:
		return fmt.Errorf("--step %v --p99 %v --min-share %v --retries %d: want positive, min-share at most 1, retries at least 0", p.Step, p.P99Limit, p.MinShare, p.Retries)
	}
	return nil
}

// tfStep is one step of a run. Times in ms, CPU in µs per delivery.
type tfStep struct {
	Target       float64 // deliveries/s aimed at
	PubRate      float64 // records/s published
	Published    int
	Expected     int64 // Published x Subs
	Delivered    int64 // of them, arrived within the step and the drain
	Deliveries   float64
	P50, P99     float64 // +Inf (JSON: -1) when more than 1% never arrived
	BrokerCPUus  float64 // broker process (utime+stime from /proc, 10 ms ticks) per delivery
	ClientCPUus  float64 // this worker (publisher and every subscriber) per delivery
	DrainSeconds float64
	Held         bool
	Broke        string // why not held
}

type tfResult struct {
	tfParams
	Repeat int
	Steps  []tfStep
	// The last step held: its deliveries per second, p99 and CPU per delivery (zero: none).
	Held, HeldP99, HeldCPUus float64
	Notes                    []string
	LoadAvg                  float64
}

// runTFWorker is the hidden "tfworker" command: inside the run's namespace it starts the
// broker, connects, runs the steps and prints its tfResult as JSON.
func runTFWorker(args []string) error {
	var p tfParams
	fs := flag.NewFlagSet("tfworker", flag.ExitOnError)
	fs.StringVar(&p.System, "system", "quicmq", "system")
	fs.IntVar(&p.Subs, "subs", 10, "subscriptions")
	fs.IntVar(&p.Conns, "conns", 1, "subscriber connections")
	p.flags(fs)
	fs.Parse(args)
	if err := p.validate(); err != nil {
		return err
	}
	p.Size = max(p.Size, 17)
	var more []string
	if p.Profile != "" {
		name := filepath.Join(p.Profile, fmt.Sprintf("truefanout-%s-s%d-c%d", p.System, p.Subs, p.Conns))
		more = []string{"--cpuprofile", name + ".pprof"}
		stopProfile, err := startCPUProfile(name + "-clients.pprof") // this process: the publisher and the subscribers
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	b, sys, stop, err := startFan(p.System, more...)
	if err != nil {
		return err
	}
	defer stop()
	nsteps := 1
	for t := p.Start; t*p.Factor <= p.Max*(1+1e-9); t *= p.Factor {
		nsteps++
	}
	// One histogram per attempt: its index travels in the payload's byte 16.
	attempts := min(nsteps*(p.Retries+1), 255)
	hists := make([]latHist, attempts)
	deliver := func(_, _ int, payload []byte) {
		if len(payload) < 17 {
			return // the record that created the topic
		}
		if k := int(payload[16]); k < attempts {
			hists[k].add(time.Now().UnixNano() - int64(binary.BigEndian.Uint64(payload)))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	if err := sys.connect(ctx, p.Subs, p.Conns, func(int) string { return brokerAddr(p.System) }, deliver); err != nil {
		return fmt.Errorf("%s: connect: %w", p.System, err)
	}
	res := &tfResult{tfParams: p}
	var seq int64
	target := p.Start
	retried := 0
	for k := range attempts {
		st := tfRunStep(ctx, sys, b.pid(), p, k, target, &hists[k], &seq)
		if st.Held {
			res.Held, res.HeldP99, res.HeldCPUus = st.Deliveries, st.P99, st.BrokerCPUus
		}
		fmt.Fprintf(os.Stderr, "  %s S=%d C=%d step %d: target %.0f deliveries/s, got %.0f, p50 %.2f p99 %.1f ms, broker %.2f client %.2f cpu-µs/delivery %s\n",
			p.System, p.Subs, p.Conns, k+1, target, st.Deliveries, st.P50, st.P99, st.BrokerCPUus, st.ClientCPUus, st.Broke)
		if math.IsInf(st.P99, 1) {
			st.P99 = -1 // JSON has no infinity
		}
		if math.IsInf(st.P50, 1) {
			st.P50 = -1
		}
		res.Steps = append(res.Steps, st)
		if !st.Held {
			if retried < p.Retries {
				retried++
				continue // the same target again
			}
			break
		}
		retried = 0
		if target *= p.Factor; target > p.Max*(1+1e-9) {
			break
		}
	}
	res.LoadAvg = loadAvg()
	sys.close()
	res.Notes = sys.notes()
	return json.NewEncoder(os.Stdout).Encode(res)
}

// tfRunStep runs step k of the ramp: it publishes at target deliveries/s (target/subs
// records/s) for --step, waits up to --drain for the deliveries into h, and judges whether
// the step held. seq numbers the records across steps. pid is the broker's.
func tfRunStep(ctx context.Context, sys fanSys, pid int, p tfParams, k int, target float64, h *latHist, seq *int64) tfStep {
	st := tfStep{Target: target}
	rate := target / float64(p.Subs)
	// Record j of the step is due j/rate after its start: total in the step.
	total := max(int(math.Round(p.Step.Seconds()*rate)), 1)
	bcpu0, ccpu0 := brokerCPU(pid), brokerCPU(os.Getpid())
	start := time.Now()
	var pubErr error
	for pubErr == nil && st.Published < total {
		// At the step's end every record of it is due: a late wake-up of this loop (a
		// loaded machine) sends the rest at once rather than fewer records.
		due := total
		if el := time.Since(start); el < p.Step {
			due = min(total, int(el.Seconds()*rate)+1)
		}
		for ; st.Published < due && pubErr == nil; st.Published++ {
			payload := make([]byte, p.Size)
			binary.BigEndian.PutUint64(payload, uint64(time.Now().UnixNano()))
			binary.BigEndian.PutUint64(payload[8:], uint64(*seq))
			payload[16] = byte(k)
			*seq++
			pubErr = sys.publish(ctx, payload)
		}
		time.Sleep(time.Millisecond)
	}
	st.PubRate = float64(st.Published) / time.Since(start).Seconds()
	st.Expected = int64(st.Published) * int64(p.Subs)
	drainStart := time.Now()
	for h.count() < st.Expected && time.Since(drainStart) < p.Drain {
		time.Sleep(5 * time.Millisecond)
	}
	st.DrainSeconds = time.Since(drainStart).Seconds()
	st.Delivered = h.count()
	if d := st.Delivered; d > 0 {
		st.BrokerCPUus = float64(brokerCPU(pid)-bcpu0) / float64(time.Microsecond) / float64(d)
		st.ClientCPUus = float64(brokerCPU(os.Getpid())-ccpu0) / float64(time.Microsecond) / float64(d)
	}
	st.Deliveries = float64(st.Delivered) / p.Step.Seconds()
	st.P50, st.P99 = h.quantile(0.5, st.Expected), h.quantile(0.99, st.Expected)
	switch {
	case pubErr != nil:
		st.Broke = fmt.Sprintf("publish failed: %v", pubErr)
	case st.PubRate < pubShare*rate:
		st.Broke = fmt.Sprintf("the publisher reached %.0f of %.0f records/s", st.PubRate, rate)
	case float64(st.Delivered) < p.MinShare*float64(st.Expected):
		st.Broke = fmt.Sprintf("%d of %d deliveries arrived", st.Delivered, st.Expected)
	case st.P99 > p.P99Limit:
		st.Broke = fmt.Sprintf("p99 %.1f ms over %.0f ms", st.P99, p.P99Limit)
	default:
		st.Held = true
	}
	return st
}

func brokerAddr(sys string) string {
	if sys == "quicmq" || sys == "quic-only" {
		return quicmqAddr
	}
	return natsAddr
}

// runTrueFanout is the "truefanout" command.
func runTrueFanout(args []string) error {
	fs := flag.NewFlagSet("truefanout", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: qmqbench truefanout [flags]

One topic, S subscriptions spread evenly over C subscriber connections (every C <= S of
--subs x --conns), one publisher connection, a publish rate rising in steps; for each
(system, S, C) the highest deliveries/s held with p99 under --p99 and the broker process's
CPU per delivery, side by side with the ratios quicmq/nats and quicmq/jetstream (goals: at
least 0.5 and at least 3) and quicmq/quic-only: "quic-only" is bare quic-go doing the same
fan-out with a stream per subscription and nothing else (no storage, no protocol), the bound
under QuicMQ on this machine. Each run has a network namespace of its own, no loss. The
clients of a run share one process: its CPU per delivery is reported too, since on a small
machine it can bound every system.

`)
		fs.PrintDefaults()
	}
	var p tfParams
	p.flags(fs)
	systemsFlag := fs.String("systems", strings.Join(fanSystemNames, ","), "systems, comma-separated: "+strings.Join(fanSystemNames, ","))
	subsFlag := fs.String("subs", "10,100,1000", "subscription counts S, comma-separated")
	connsFlag := fs.String("conns", "1,10,100", "subscriber connection counts C, comma-separated (runs with C > S are skipped)")
	repeat := fs.Int("repeat", 1, "repetitions of the whole set (medians are reported)")
	out := fs.String("out", defaultOut, "directory for JSON results and PNG plots")
	fs.Parse(args)
	subs, err := parseInts(*subsFlag)
	if err != nil {
		return fmt.Errorf("--subs: %w", err)
	}
	conns, err := parseInts(*connsFlag)
	if err != nil {
		return fmt.Errorf("--conns: %w", err)
	}
	systems := strings.Split(*systemsFlag, ",")
	for _, s := range systems {
		if _, err := newFanSys(s, ""); err != nil {
			return fmt.Errorf("--systems: %w", err)
		}
	}
	q := p
	q.Subs, q.Conns = 1, 1
	if err := q.validate(); err != nil {
		return err
	}
	if err := lossy.Check(); err != nil {
		return fmt.Errorf("%w; this scenario runs each broker in a namespace of its own and is skipped", err)
	}
	slot, stop := killOnSignal()
	defer stop()
	type combo struct{ s, c int }
	var combos []combo
	for _, s := range subs {
		for _, c := range conns {
			if c <= s {
				combos = append(combos, combo{s, c})
			}
		}
	}
	var results []*tfResult
	total := *repeat * len(combos) * len(systems)
	started := time.Now()
	n := 0
	for r := 1; r <= *repeat; r++ {
		for _, cb := range combos {
			for _, sys := range systems {
				n++
				q := p
				q.System, q.Subs, q.Conns = sys, cb.s, cb.c
				fmt.Fprintf(os.Stderr, "[%d/%d %s] repeat %d: %s, %d subscriptions over %d connections\n",
					n, total, time.Since(started).Round(time.Second), r, sys, cb.s, cb.c)
				var res tfResult
				steps := (math.Ceil(math.Log(p.Max/p.Start)/math.Log(p.Factor)) + 1) * float64(p.Retries+1)
				budget := time.Duration(steps)*(p.Step+p.Drain) + 3*time.Minute
				if err := workerIn(sys, budget, func(string) []string { return q.args() }, &res, slot); err != nil {
					fmt.Fprintf(os.Stderr, "  failed: %v\n", err)
					continue
				}
				res.Repeat = r
				fmt.Fprintf(os.Stderr, "  held %.0f deliveries/s (p99 %.1f ms, %.2f broker cpu-µs/delivery) %v\n", res.Held, res.HeldP99, res.HeldCPUus, res.Notes)
				results = append(results, &res)
			}
		}
	}
	path, err := saveResults(*out, "truefanout", results)
	if err != nil {
		return err
	}
	printTrueFanout(results, systems)
	if len(results) == 0 {
		return nil
	}
	png := strings.TrimSuffix(path, ".json") + ".png"
	if err := plotTrueFanout(results, png); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "plot: %s\n", png)
	return nil
}

// plotTrueFanout draws the deliveries/s each system held (the median over repeats) for each
// (S, C) of results, grouped by (S, C), a colour per system.
func plotTrueFanout(results []*tfResult, png string) error {
	if len(results) == 0 {
		return fmt.Errorf("no results to plot")
	}
	type combo struct{ s, c int }
	var combos []combo
	var groups []string
	for _, r := range results {
		if cb := (combo{r.Subs, r.Conns}); !slices.Contains(combos, cb) {
			combos = append(combos, cb)
			groups = append(groups, fmt.Sprintf("S=%d C=%d", cb.s, cb.c))
		}
	}
	systems := systemsOfTF(results)
	values := make([][]float64, len(systems))
	for i, sys := range systems {
		values[i] = make([]float64, len(combos))
		for j, cb := range combos {
			values[i][j] = math.NaN()
			if g := pickTF(results, sys, cb.s, cb.c); len(g) > 0 {
				values[i][j] = medianOf(g, func(r *tfResult) float64 { return r.Held }).med
			}
		}
	}
	title := fmt.Sprintf("one topic, S subscriptions over C connections: deliveries/s held with p99 < %.0f ms (median)", results[0].P99Limit)
	return groupedBarPlot(title, "deliveries/s", groups, systems, values, png)
}

// systemsOfTF is the systems of results, in the order they first appear.
func systemsOfTF(results []*tfResult) []string {
	var systems []string
	for _, r := range results {
		if !slices.Contains(systems, r.System) {
			systems = append(systems, r.System)
		}
	}
	return systems
}

func pickTF(rs []*tfResult, sys string, s, c int) []*tfResult {
	var out []*tfResult
	for _, r := range rs {
		if r.System == sys && r.Subs == s && r.Conns == c {
			out = append(out, r)
		}
	}
	return out
}

// medianOf is field (fanout.go) for any kind of result.
func medianOf[T any](rs []T, f func(T) float64) stat {
	var vs []float64
	for _, r := range rs {
		vs = append(vs, f(r))
	}
	return median(vs)
}

// printTrueFanout prints one row per (S, C, system), then the ratios per (S, C): medians over
// repeats, ratios within a repeat.
func printTrueFanout(rs []*tfResult, systems []string) {
	type key struct{ s, c int }
	var keys []key
	seen := map[key]bool{}
	for _, r := range rs {
		if k := (key{r.Subs, r.Conns}); !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	fmt.Println("| S | C | system | deliveries/s held | p99 ms there | broker cpu-µs/delivery | client cpu-µs/delivery | next step broke on |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for _, k := range keys {
		for _, sys := range systems {
			g := pickTF(rs, sys, k.s, k.c)
			if len(g) == 0 {
				continue
			}
			broke := "none: --max reached"
			if st := g[0].Steps; len(st) > 0 && !st[len(st)-1].Held {
				broke = st[len(st)-1].Broke
			}
			fmt.Printf("| %d | %d | %s | %v | %v | %v | %v | %s |\n", k.s, k.c, sys,
				medianOf(g, func(r *tfResult) float64 { return r.Held }),
				medianOf(g, func(r *tfResult) float64 { return r.HeldP99 }),
				medianOf(g, func(r *tfResult) float64 { return r.HeldCPUus }),
				medianOf(g, func(r *tfResult) float64 { return heldStep(r).ClientCPUus }), broke)
		}
	}
	fmt.Println()
	fmt.Println("| S | C | deliveries/s quicmq/nats (goal >= 0.5) | quicmq/jetstream (goal >= 3) | cpu per delivery quicmq/nats | quicmq/jetstream | deliveries/s quicmq/quic-only | cpu per delivery quicmq/quic-only |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	held := func(r *tfResult) float64 { return r.Held }
	cpu := func(r *tfResult) float64 { return r.HeldCPUus }
	type pair struct {
		other string
		f     func(*tfResult) float64
	}
	for _, k := range keys {
		cells := []string{strconv.Itoa(k.s), strconv.Itoa(k.c)}
		for _, pr := range []pair{{"nats", held}, {"jetstream", held}, {"nats", cpu}, {"jetstream", cpu}, {"quic-only", held}, {"quic-only", cpu}} {
			var vs []float64
			for _, a := range pickTF(rs, "quicmq", k.s, k.c) {
				for _, o := range pickTF(rs, pr.other, k.s, k.c) {
					if o.Repeat == a.Repeat && pr.f(o) > 0 {
						vs = append(vs, pr.f(a)/pr.f(o))
					}
				}
			}
			if len(vs) == 0 {
				cells = append(cells, "-")
			} else {
				cells = append(cells, median(vs).String())
			}
		}
		fmt.Println("| " + strings.Join(cells, " | ") + " |")
	}
}

// heldStep is the last step held (zero when none was).
func heldStep(r *tfResult) tfStep {
	for i := len(r.Steps) - 1; i >= 0; i-- {
		if r.Steps[i].Held {
			return r.Steps[i]
		}
	}
	return tfStep{}
}
