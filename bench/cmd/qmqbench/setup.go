package main

// Scenario 5 (subscription set-up): new subscriptions per second on ONE open connection,
// QuicMQ (a new QUIC stream per subscription) against what a TCP broker needs to keep
// subscriptions independent, a new TLS 1.3-over-TCP connection per subscription (NATS with
// TLS), with NATS's SUB on one existing connection beside them for context.
//
// A subscription counts as set up twice: "confirmed" when the broker has answered for it
// (QuicMQ: SUBSCRIBED; NATS: the PONG of a Flush after SUB, so the server has processed the
// SUB), and "live" when its first record has arrived. QuicMQ's topics each hold one record
// at offset 0 before the clock starts and every subscription starts from Earliest, so its
// first record comes from the log right behind SUBSCRIBED. NATS core stores nothing: its
// subscriber publishes one message to its own subject after the Flush and waits for it, one
// more round trip. Every subscription stays open until its level ends.
//
// Processes: the parent (root namespace) starts "qmqbench setup worker" in a fresh
// namespace per (repeat, loss, system); the worker starts the broker as its child (QuicMQ:
// the "broker" command; NATS with TLS: "setup broker", with a throwaway CA and ECDSA P-256
// certificate made by the worker) and measures each --parallel level on a fresh connection.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"math"
	"math/big"
	"net"
	"os"
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
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/quicmq/quicmq/bench/lossy"
	"github.com/quicmq/quicmq/client"
)

// setupSystems are the systems of scenario 5, and what one subscription costs in each.
var setupSystems = []string{"quicmq", "nats-tls", "nats-sub"}

var setupMeaning = map[string]string{
	"quicmq":   "new QUIC stream on one connection, confirmed (SUBSCRIBED), own flow control, replayable",
	"nats-tls": "new TLS 1.3-over-TCP connection + SUB + Flush",
	"nats-sub": "SUB + Flush on one existing TLS connection: interest only, no per-subscription flow control or replay",
}

var setupColors = map[string]color.Color{
	"quicmq":   palette["quicmq"],
	"nats-tls": palette["nats"],
	"nats-sub": color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 255},
}

// setupParams is one worker run: one system, one loss rate, every parallel level.
type setupParams struct {
	System   string
	NS       string // the worker's namespace, for the loss rule
	Loss     float64
	Delay    time.Duration // one-way delay each way by a UDP relay: QuicMQ only
	Subs     int           // subscriptions per level
	Parallel []int         // goroutines setting up subscriptions at once, one level each
	Size     int           // payload bytes of the first record
}

func (p setupParams) args() []string {
	var par []string
	for _, v := range p.Parallel {
		par = append(par, strconv.Itoa(v))
	}
	return []string{"setup", "worker", "--system", p.System, "--ns", p.NS, "--loss", fmt.Sprint(p.Loss),
		"--delay", p.Delay.String(), "--subs", fmt.Sprint(p.Subs), "--parallel", strings.Join(par, ","),
		"--size", fmt.Sprint(p.Size)}
}

// setupResult is one level of one worker run (times in milliseconds).
type setupResult struct {
	System     string
	Loss       float64
	Delay      time.Duration
	Subs       int
	Parallel   int
	Size       int
	Repeat     int
	Live       int     // subscriptions confirmed and live
	Errors     int     // subscriptions that failed
	FirstError string  `json:",omitempty"`
	Seconds    float64 // from the first Subscribe to the last first record
	Rate       float64 // live subscriptions per second
	// Per subscription, from the start of its set-up: to the broker's confirmation, and to
	// its first record.
	ConfirmP50, ConfirmP99, ConfirmMax float64
	LiveP50, LiveP99, LiveMax          float64
	CPUus                              float64 // client + broker CPU time per subscription, µs
	CDFConfirm, CDFLive                [][2]float64
	DroppedPackets                     int64
	LoadAvg                            float64
}

// setupSys is one system seen by the worker. one is called from several goroutines.
type setupSys interface {
	// open starts a level: a fresh connection where subscriptions share one.
	open(ctx context.Context, level int) error
	// one sets up subscription i of the level and returns when the broker confirmed it
	// and when its first record arrived. It stays open until closeLevel.
	one(ctx context.Context, level, i int) (confirmed, live time.Time, err error)
	closeLevel()
}

func setupTopic(i int) string { return fmt.Sprintf("setup.%04d", i) }

// runSetup is the "setup" command: the parent, or (first argument) its hidden worker and
// NATS-with-TLS broker, which share the one command line of main.
func runSetup(args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "worker":
			return runSetupWorker(args[1:])
		case "broker":
			return runSetupBroker(args[1:])
		}
	}
	fs := flag.NewFlagSet("setup", flag.ExitOnError)
	systemsFlag := fs.String("systems", strings.Join(setupSystems, ","), "systems, comma-separated: quicmq, nats-tls (a TLS-over-TCP connection per subscription), nats-sub (SUB on one TLS connection)")
	subs := fs.Int("subs", 1000, "subscriptions per level, all kept open (QuicMQ's node allows 1024 per connection)")
	parFlag := fs.String("parallel", "1,16", "levels: subscriptions set up at once, comma-separated")
	lossFlag := fs.String("loss", "0", "packet loss rates in percent, comma-separated (nftables, every packet in the namespace)")
	delay := fs.Duration("delay", 0, "one-way delay each way on QuicMQ's subscriber connection (userspace UDP relay); the NATS systems are skipped: no TCP delay emulation here")
	size := fs.Int("size", 128, "payload bytes of each subscription's first record")
	repeat := fs.Int("repeat", 3, "repetitions (medians are reported)")
	out := fs.String("out", defaultOut, "directory for the JSON results and PNG plots")
	fs.Parse(args)
	p := setupParams{Subs: *subs, Size: *size, Delay: *delay}
	var err error
	if p.Parallel, err = parseInts(*parFlag); err != nil {
		return fmt.Errorf("--parallel: %w", err)
	}
	losses, err := parsePercents(*lossFlag)
	if err != nil {
		return fmt.Errorf("--loss: %w", err)
	}
	var systems []string
	for _, s := range strings.Split(*systemsFlag, ",") {
		switch {
		case !slices.Contains(setupSystems, s):
			return fmt.Errorf("--systems: unknown %q (want %v)", s, setupSystems)
		case *delay > 0 && s != "quicmq":
			fmt.Fprintf(os.Stderr, "%s skipped: --delay needs the UDP relay; there is no TCP delay emulation here\n", s)
		default:
			systems = append(systems, s)
		}
	}
	if len(systems) == 0 || p.Subs < 1 {
		return errors.New("nothing to run")
	}
	if err := lossy.Check(); err != nil {
		return fmt.Errorf("%w; this scenario runs each broker in a namespace of its own and is skipped", err)
	}
	if stale, _ := lossy.RemoveStale(); len(stale) > 0 {
		fmt.Fprintf(os.Stderr, "removed namespaces left by killed runs: %v\n", stale)
	}
	slot, stop := killOnSignal()
	defer stop()

	var results []*setupResult
	started := time.Now()
	runs, total := 0, *repeat*len(losses)*len(systems)
	for r := 1; r <= *repeat; r++ {
		for _, loss := range losses {
			for _, sys := range systems {
				runs++
				q := p
				q.System, q.Loss = sys, loss
				fmt.Fprintf(os.Stderr, "[%d/%d %s] repeat %d: %s, loss %.1f%%, %d subscriptions at parallel %v\n",
					runs, total, time.Since(started).Round(time.Second), r, sys, loss*100, q.Subs, q.Parallel)
				var levels []*setupResult
				err := workerIn(sys, 6*time.Minute, func(ns string) []string { q.NS = ns; return q.args() }, &levels, slot)
				if err != nil {
					fmt.Fprintf(os.Stderr, "  failed: %v\n", err)
					continue
				}
				for _, l := range levels {
					l.Repeat = r
					fmt.Fprintf(os.Stderr, "  parallel %d: %.0f subs/s; confirmed p50 %.2f p99 %.2f ms; live p50 %.2f p99 %.2f ms; %.0f cpu-µs/sub; %d errors\n",
						l.Parallel, l.Rate, l.ConfirmP50, l.ConfirmP99, l.LiveP50, l.LiveP99, l.CPUus, l.Errors)
					results = append(results, l)
				}
			}
		}
	}
	path, err := saveResults(*out, "setup", results)
	if err != nil {
		return err
	}
	printSetup(os.Stdout, results, losses, p.Parallel, systems)
	for _, loss := range losses {
		for _, par := range p.Parallel {
			f := fmt.Sprintf("%s-loss%.1f-par%d.png", strings.TrimSuffix(path, ".json"), loss*100, par)
			if err := setupCDF(results, loss, par, systems, f); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "plot: %s\n", f)
		}
	}
	for _, r := range results {
		if r.Errors > 0 {
			return fmt.Errorf("%s at parallel %d: %d subscriptions failed: %s", r.System, r.Parallel, r.Errors, r.FirstError)
		}
	}
	return nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%q: want a positive integer", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func parsePercents(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v < 0 || v > 100 {
			return nil, fmt.Errorf("%q: want a percentage", f)
		}
		out = append(out, v/100)
	}
	return out, nil
}

// printSetup writes the Markdown table: medians over the repeats (lowest-highest), and
// QuicMQ's rate over each system's in the same repeat.
func printSetup(w io.Writer, rs []*setupResult, losses []float64, levels []int, systems []string) {
	fmt.Fprintln(w, "| loss | parallel | system | live subs/s | confirmed p50 ms | confirmed p99 ms | live p50 ms | live p99 ms | cpu-µs/sub | quicmq/this (subs/s) | failed |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, loss := range losses {
		for _, par := range levels {
			for _, sys := range systems {
				var g []*setupResult
				for _, r := range rs {
					if r.System == sys && r.Loss == loss && r.Parallel == par {
						g = append(g, r)
					}
				}
				if len(g) == 0 {
					continue
				}
				f := func(get func(*setupResult) float64) stat {
					var vs []float64
					for _, r := range g {
						vs = append(vs, get(r))
					}
					return median(vs)
				}
				var ratios []float64
				for _, r := range g {
					for _, q := range rs {
						if q.System == "quicmq" && q.Loss == loss && q.Parallel == par && q.Repeat == r.Repeat && r.Rate > 0 {
							ratios = append(ratios, q.Rate/r.Rate)
						}
					}
				}
				ratio := "-"
				if len(ratios) > 0 {
					ratio = median(ratios).String()
				}
				fmt.Fprintf(w, "| %.1f%% | %d | %s | %v | %v | %v | %v | %v | %v | %s | %v |\n", loss*100, par, sys,
					f(func(r *setupResult) float64 { return r.Rate }),
					f(func(r *setupResult) float64 { return r.ConfirmP50 }),
					f(func(r *setupResult) float64 { return r.ConfirmP99 }),
					f(func(r *setupResult) float64 { return r.LiveP50 }),
					f(func(r *setupResult) float64 { return r.LiveP99 }),
					f(func(r *setupResult) float64 { return r.CPUus }),
					ratio,
					f(func(r *setupResult) float64 { return float64(r.Errors) }))
			}
		}
	}
	fmt.Fprintln(w)
	for _, sys := range systems {
		fmt.Fprintf(w, "- %s: %s\n", sys, setupMeaning[sys])
	}
}

// setupCDF draws, per system, the distribution of set-up latency (solid: to the first
// record; dashed: to the broker's confirmation) of its repeat with the median rate.
func setupCDF(rs []*setupResult, loss float64, par int, systems []string, file string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("subscription set-up, %.1f%% loss, %d at a time\nsolid: to the first record; dashed: to the confirmation", loss*100, par)
	p.X.Label.Text = "set-up latency per subscription (ms, log)"
	p.Y.Label.Text = "fraction of subscriptions set up"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top = false
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	for _, sys := range systems {
		var g []*setupResult
		var rates []float64
		for _, r := range rs {
			if r.System == sys && r.Loss == loss && r.Parallel == par {
				g = append(g, r)
				rates = append(rates, r.Rate)
			}
		}
		if len(g) == 0 {
			continue
		}
		rep := g[0]
		m := median(rates).med
		for _, r := range g {
			if math.Abs(r.Rate-m) < math.Abs(rep.Rate-m) {
				rep = r
			}
		}
		for _, c := range []struct {
			cdf    [][2]float64
			dashed bool
			label  string
		}{
			{rep.CDFLive, false, fmt.Sprintf("%s: %s subs/s, p99 %s ms", sys, fmtNum(rep.Rate), fmtNum(rep.LiveP99))},
			{rep.CDFConfirm, true, ""},
		} {
			var xy plotter.XYs
			for _, q := range c.cdf {
				xy = append(xy, plotter.XY{X: math.Max(q[0], 0.001), Y: q[1]})
			}
			if len(xy) == 0 {
				continue
			}
			l, err := plotter.NewLine(xy)
			if err != nil {
				return err
			}
			l.Color = setupColors[sys]
			l.Width = vg.Points(1.5)
			if c.dashed {
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			}
			p.Add(l)
			if c.label != "" {
				p.Legend.Add(c.label, l)
			}
		}
	}
	return p.Save(7*vg.Inch, 4.5*vg.Inch, file)
}

// runSetupWorker is "setup worker": inside the namespace, it starts the broker, measures
// each level and prints the results as JSON.
func runSetupWorker(args []string) error {
	var p setupParams
	fs := flag.NewFlagSet("setup worker", flag.ExitOnError)
	fs.StringVar(&p.System, "system", "quicmq", "system")
	fs.StringVar(&p.NS, "ns", "", "namespace of the loss rule")
	fs.Float64Var(&p.Loss, "loss", 0, "packet loss, fraction")
	fs.DurationVar(&p.Delay, "delay", 0, "one-way delay (QuicMQ)")
	fs.IntVar(&p.Subs, "subs", 1000, "subscriptions per level")
	par := fs.String("parallel", "1", "levels")
	fs.IntVar(&p.Size, "size", 128, "payload bytes")
	fs.Parse(args)
	var err error
	if p.Parallel, err = parseInts(*par); err != nil {
		return err
	}
	res, err := measureSetup(p)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

func measureSetup(p setupParams) ([]*setupResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	payload := make([]byte, p.Size)
	var b *brokerProc
	var sys setupSys
	var err error
	switch p.System {
	case "quicmq":
		if b, err = startBroker("quicmq"); err != nil {
			return nil, err
		}
		q := &quicmqSetup{ca: filepath.Join(b.dir, "data", "tls", "ca.pem"), delay: p.Delay}
		if err := q.prefill(ctx, p.Subs, payload); err != nil {
			b.stop()
			return nil, err
		}
		sys = q
	case "nats-tls", "nats-sub":
		dir, err := os.MkdirTemp("", "qmqbench-setup-certs-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		ca, cert, key, err := writeTestCerts(dir)
		if err != nil {
			return nil, err
		}
		if b, err = startSetupBroker("--cert", cert, "--key", key); err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ca)
		sys = &natsSetup{perSub: p.System == "nats-tls", payload: payload,
			tls: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13}}
	default:
		return nil, fmt.Errorf("unknown system %q (want %v)", p.System, setupSystems)
	}
	defer b.stop()
	var ns *lossy.Namespace
	if p.NS != "" {
		ns = &lossy.Namespace{Name: p.NS}
		match := ""
		if p.Delay > 0 { // the levels' relays are in this namespace: their hops meet the loss once
			match = lossy.ExceptRelays
		}
		if err := ns.SetLossMatch(p.Loss, match); err != nil {
			return nil, err
		}
		defer ns.SetLoss(0)
	}
	var out []*setupResult
	for level, par := range p.Parallel {
		var dropped0 int64
		if ns != nil {
			dropped0, _ = ns.Dropped()
		}
		if err := sys.open(ctx, level); err != nil {
			return nil, fmt.Errorf("%s: level %d: %w", p.System, level, err)
		}
		cpu0 := processCPU() + brokerCPU(b.pid())
		res := runSetupLevel(ctx, sys, level, p.Subs, par)
		cpu := processCPU() + brokerCPU(b.pid()) - cpu0
		sys.closeLevel()
		res.System, res.Loss, res.Delay, res.Size = p.System, p.Loss, p.Delay, p.Size
		if res.Live > 0 {
			res.CPUus = float64(cpu) / float64(time.Microsecond) / float64(res.Live)
		}
		if ns != nil {
			d, _ := ns.Dropped()
			res.DroppedPackets = d - dropped0
		}
		res.LoadAvg = loadAvg()
		out = append(out, res)
	}
	return out, nil
}

// runSetupLevel sets up n subscriptions, par at a time, each goroutine one after the other
// (confirmed and live before its next), and summarises them.
func runSetupLevel(ctx context.Context, sys setupSys, level, n, par int) *setupResult {
	res := &setupResult{Subs: n, Parallel: par}
	confirm := make([]float64, 0, n)
	live := make([]float64, 0, n)
	var mu sync.Mutex // guards confirm, live and res's error fields
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				t0 := time.Now()
				c, l, err := sys.one(ctx, level, i)
				mu.Lock()
				if err != nil {
					res.Errors++
					if res.FirstError == "" {
						res.FirstError = fmt.Sprintf("subscription %d: %v", i, err)
					}
				} else {
					confirm = append(confirm, float64(c.Sub(t0))/1e6)
					live = append(live, float64(l.Sub(t0))/1e6)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	res.Live = len(live)
	res.Rate = float64(res.Live) / res.Seconds
	res.ConfirmP50, res.ConfirmP99, res.ConfirmMax, res.CDFConfirm = latencySummary(confirm)
	res.LiveP50, res.LiveP99, res.LiveMax, res.CDFLive = latencySummary(live)
	return res
}

// latencySummary sorts ms and returns its p50, p99, maximum and CDF points.
func latencySummary(ms []float64) (p50, p99, maxv float64, cdf [][2]float64) {
	if len(ms) == 0 {
		return 0, 0, 0, nil
	}
	slices.Sort(ms)
	q := func(f float64) float64 { return ms[int(f*float64(len(ms)-1))] }
	for _, f := range cdfQuantiles() {
		if f < 1-1e-9 { // the last point is the maximum, exactly
			cdf = append(cdf, [2]float64{q(f), f})
		}
	}
	cdf = append(cdf, [2]float64{ms[len(ms)-1], 1})
	return q(0.5), q(0.99), ms[len(ms)-1], cdf
}

// processCPU is this process's CPU time (user + system, all threads) so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// quicmqSetup: each subscription a new stream on the level's one connection, from
// Earliest on its own topic, which holds one record at offset 0.
type quicmqSetup struct {
	ca    string
	delay time.Duration

	conn  *client.Conn // the level's connection; set by open, read by one's goroutines
	relay *lossy.Relay // the level's relay when delay > 0 (it serves one client address)
	mu    sync.Mutex   // guards subs
	subs  []*client.Subscription
}

// prefill stores one record on each of n topics, over a connection of its own (not through
// the relay), before any clock starts.
func (q *quicmqSetup) prefill(ctx context.Context, n int, payload []byte) error {
	c, err := client.Dial(ctx, client.Options{CAFile: q.ca, Name: "setup-prefill"}, quicmqAddr)
	if err != nil {
		return err
	}
	defer c.Close()
	fs := make([]*client.Future, 0, n)
	for i := range n {
		f, err := c.PublishAsync(ctx, client.Message{Topic: setupTopic(i), Payload: payload})
		if err != nil {
			return fmt.Errorf("prefill: %w", err)
		}
		fs = append(fs, f)
	}
	for _, f := range fs {
		if _, err := f.Wait(ctx); err != nil {
			return fmt.Errorf("prefill: %w", err)
		}
	}
	return nil
}

func (q *quicmqSetup) open(ctx context.Context, _ int) error {
	addr := quicmqAddr
	if q.delay > 0 {
		r, err := lossy.NewRelay(quicmqAddr, q.delay)
		if err != nil {
			return err
		}
		q.relay, addr = r, r.Addr()
	}
	c, err := client.Dial(ctx, client.Options{CAFile: q.ca, Name: "setup-sub"}, addr)
	if err != nil {
		return err
	}
	q.conn = c
	return nil
}

func (q *quicmqSetup) one(ctx context.Context, _, i int) (time.Time, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := q.conn.Subscribe(ctx, setupTopic(i), client.SubscribeOptions{From: client.Earliest})
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	confirmed := time.Now()
	q.mu.Lock()
	q.subs = append(q.subs, s)
	q.mu.Unlock()
	r, err := s.Next(ctx)
	if err != nil {
		return confirmed, time.Time{}, err
	}
	live := time.Now()
	if r.Topic != setupTopic(i) || r.Offset != 0 {
		return confirmed, live, fmt.Errorf("first record %s@%d, want %s@0", r.Topic, r.Offset, setupTopic(i))
	}
	return confirmed, live, nil
}

// closeLevel closes the connection, and with it every subscription of the level.
func (q *quicmqSetup) closeLevel() {
	if q.conn != nil {
		q.conn.Close()
		q.conn = nil
	}
	if q.relay != nil {
		q.relay.Close()
		q.relay = nil
	}
	q.mu.Lock()
	q.subs = nil
	q.mu.Unlock()
}

// natsSetup: NATS core over TLS 1.3, a new connection per subscription (perSub) or all
// subscriptions on the level's one connection.
type natsSetup struct {
	perSub  bool
	tls     *tls.Config
	payload []byte

	shared *nats.Conn // the level's connection unless perSub; set by open
	mu     sync.Mutex // guards conns
	conns  []*nats.Conn
}

func (s *natsSetup) connect() (*nats.Conn, error) {
	return nats.Connect("tls://"+natsAddr, nats.Secure(s.tls.Clone()), nats.TLSHandshakeFirst(),
		nats.Name("setup"), nats.NoReconnect(), nats.Timeout(30*time.Second))
}

func (s *natsSetup) open(context.Context, int) error {
	if s.perSub {
		return nil
	}
	var err error
	s.shared, err = s.connect()
	return err
}

func (s *natsSetup) one(_ context.Context, level, i int) (time.Time, time.Time, error) {
	nc := s.shared
	if s.perSub {
		var err error
		if nc, err = s.connect(); err != nil {
			return time.Time{}, time.Time{}, err
		}
		s.mu.Lock()
		s.conns = append(s.conns, nc)
		s.mu.Unlock()
	}
	subject := fmt.Sprintf("setup.%d.%04d", level, i)
	// A callback subscription, as applications use (SubscribeSync would allocate a channel
	// of nats.go's default 65,536 slots, 512 KiB, per subscription).
	first := make(chan *nats.Msg, 1)
	_, err := nc.Subscribe(subject, func(m *nats.Msg) {
		select {
		case first <- m:
		default:
		}
	})
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	// The server answers PINGs in order, so its PONG says the SUB was processed.
	if err := nc.FlushTimeout(30 * time.Second); err != nil {
		return time.Time{}, time.Time{}, err
	}
	confirmed := time.Now()
	if err := nc.Publish(subject, s.payload); err != nil {
		return confirmed, time.Time{}, err
	}
	var m *nats.Msg
	select {
	case m = <-first:
	case <-time.After(30 * time.Second):
		return confirmed, time.Time{}, errors.New("no first message within 30 s")
	}
	if len(m.Data) != len(s.payload) {
		return confirmed, time.Time{}, fmt.Errorf("first message has %d bytes, want %d", len(m.Data), len(s.payload))
	}
	return confirmed, time.Now(), nil
}

func (s *natsSetup) closeLevel() {
	s.mu.Lock()
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for _, nc := range conns {
		nc.Close()
	}
	if s.shared != nil {
		s.shared.Close()
		s.shared = nil
	}
}

// writeTestCerts makes a throwaway CA and a server certificate it signs (ECDSA P-256, as
// QuicMQ's nodes generate, for 127.0.0.1 and localhost, valid for a day) in dir. It returns
// the CA's PEM and the certificate and key files.
func writeTestCerts(dir string) (caPEM []byte, certFile, keyFile string, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, "", "", err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "qmqbench throwaway CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, "", "", err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, "", "", err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, "", "", err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, "", "", err
	}
	caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := errors.Join(
		os.WriteFile(filepath.Join(dir, "ca.pem"), caPEM, 0o644),
		os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644),
		os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600),
	); err != nil {
		return nil, "", "", err
	}
	return caPEM, certFile, keyFile, nil
}

// runSetupBroker is "setup broker": a NATS server that requires TLS 1.3 on every client
// connection, with the TLS handshake first (before INFO: one round trip fewer than NATS's
// default). Like "broker", it prints READY and runs until stdin closes or SIGTERM.
func runSetupBroker(args []string) error {
	fs := flag.NewFlagSet("setup broker", flag.ExitOnError)
	certFile := fs.String("cert", "", "server certificate (PEM)")
	keyFile := fs.String("key", "", "server key (PEM)")
	fs.Parse(args)
	cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() { // the worker closes our stdin when it is done (or dies)
		io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	return serveNATS(ctx, &server.Options{
		Host: "127.0.0.1", Port: 4222, NoSigs: true, NoLog: true,
		TLSConfig:  &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13},
		TLSTimeout: 30, TLSHandshakeFirst: true,
	})
}

// startSetupBroker starts "setup broker" as a child, as startBroker does for "broker".
func startSetupBroker(extra ...string) (*brokerProc, error) {
	return startChild("nats-tls", func(string) []string { return append([]string{"setup", "broker"}, extra...) })
}
