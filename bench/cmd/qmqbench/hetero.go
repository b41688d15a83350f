package main

// The heterogeneous fan-out of issue 15: ONE topic read by one subscription on each of
// --conns subscriber connections, one of them behind a bad path (--bad-loss loss and a
// --bad-rtt round trip, a delaying relay in the run's namespace with the loss rule on the
// relay's hops only), the rest on clean loopback; against a run without the bad connection
// (the clean ones alone), for QuicMQ and NATS core. Goal: the clean connections' p99 with
// the bad one within 10% of their p99 without it.

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/quicmq/quicmq/bench/lossy"
)

type hetParams struct {
	System   string
	NS       string
	Conns    int // subscriber connections with the bad one (the run without it has Conns-1)
	Bad      bool
	BadLoss  float64
	BadRTT   time.Duration
	Rate     int // records/s to the one topic
	Size     int
	Warmup   time.Duration
	Duration time.Duration
	Drain    time.Duration
	Idle     idleMirrors // idle mirrored topics of another region beside the hot one (idlemirror.go)
	// WindowProfile, when not empty, is a directory for CPU profiles of the QuicMQ node under
	// test and, with idle mirrored topics, of the idle region's node over the publishing
	// (warm-up and window): ProfileName-node.pprof, ProfileName-idle.pprof (as fanout's).
	WindowProfile string
	ProfileName   string
}

func (p *hetParams) flags(fs *flag.FlagSet) {
	fs.IntVar(&p.Conns, "conns", 100, "subscriber connections, one subscription each, with the bad one")
	fs.Float64Var(&p.BadLoss, "bad-loss", 0.05, "packet loss on the bad connection's path, fraction (each direction, on the relay's hops only)")
	fs.DurationVar(&p.BadRTT, "bad-rtt", 50*time.Millisecond, "round trip the relay adds to the bad connection (half each way)")
	fs.IntVar(&p.Rate, "rate", 200, "records per second published to the one topic (deliveries/s = rate x connections)")
	fs.IntVar(&p.Size, "size", 128, "payload bytes (at least 17)")
	fs.DurationVar(&p.Warmup, "warmup", time.Second, "publishing before the measured window")
	fs.DurationVar(&p.Duration, "duration", 10*time.Second, "measured window")
	fs.DurationVar(&p.Drain, "drain", 10*time.Second, "longest wait after the window for the clean connections' records")
	fs.StringVar(&p.WindowProfile, "window-profile", "", "directory for CPU profiles of the QuicMQ node under test and of the idle region's node (--idle-mirrored) over each run's publishing, warm-up and window (SYSTEM-badB-idleN-rR-node.pprof, ...-idle.pprof; read with 'go tool pprof -top FILE')")
}

func (p hetParams) args() []string {
	a := []string{"hetworker", "--system", p.System, "--ns", p.NS, "--bad=" + fmt.Sprint(p.Bad),
		"--conns", fmt.Sprint(p.Conns), "--bad-loss", fmt.Sprint(p.BadLoss), "--bad-rtt", p.BadRTT.String(),
		"--rate", fmt.Sprint(p.Rate), "--size", fmt.Sprint(p.Size), "--warmup", p.Warmup.String(),
		"--duration", p.Duration.String(), "--drain", p.Drain.String(),
		"--window-profile", p.WindowProfile, "--profile-name", p.ProfileName}
	return append(a, p.Idle.args()...)
}

type hetResult struct {
	hetParams
	Repeat             int
	Published          int   // in the window
	CleanExpected      int64 // Published x clean connections
	CleanDelivered     int64
	CleanP50, CleanP99 float64 // ms; -1 when the quantile falls among missing records
	CleanP999          float64
	BadExpected        int64
	BadDelivered       int64
	BadP50, BadP99     float64
	DroppedPackets     int64
	BrokerCPUus        float64 // per delivery
	// The idle region's node's CPU per delivery over the same time (with --idle-mirrored).
	IdleNodeCPUus float64 `json:",omitempty"`
	// The QuicMQ node under test's Go heap when the publishing starts and its garbage
	// collections from then to the end of the window (warm-up included), from its
	// /debug/pprof/heap: a GC in the window is one of the things that move the p99.
	NodeHeapStartMiB float64 `json:",omitempty"`
	NodeGCs          int64   `json:",omitempty"`
	// The worker's own (the clients', which time every record) GCs and their pauses over the
	// same time.
	WorkerGCs       int64
	WorkerGCPauseMs float64
	// The whole machine's cores over the warm-up and window (/proc/stat): the share busy
	// (this run's processes and anything else), and the share stolen by the hypervisor.
	MachineBusyPct, MachineStealPct float64
	// The seconds of the window in which a GC of the node, or of the worker, ended (-1: in
	// the warm-up), to set against CleanP99PerSecond.
	NodeGCSeconds   []int `json:",omitempty"`
	WorkerGCSeconds []int `json:",omitempty"`
	// Per second of the window: records published, and the clean connections' p99 of the
	// records sent in it (ms; -1 when it falls among missing records); CleanP99SecMedian is
	// the median of those p99s, CleanP99SecMax the worst.
	PublishedPerSecond []int     `json:",omitempty"`
	CleanPerSecond     []int64   `json:",omitempty"` // of those, received by the clean connections
	CleanP99PerSecond  []float64 `json:",omitempty"`
	CleanP99SecMedian  float64
	CleanP99SecMax     float64
	Notes              []string
	LoadAvg            float64
	// With idle mirrored topics: their creation, listing and parking before the run, and
	// the mirror streams open or waiting on the node's link after it.
	IdleSetupSeconds float64 `json:",omitempty"`
	IdleStreamsEnd   float64 `json:",omitempty"`
}

func finite(v float64) float64 {
	if math.IsInf(v, 0) {
		return -1
	}
	return v
}

// runHetWorker is the hidden "hetworker" command.
func runHetWorker(args []string) error {
	var p hetParams
	fs := flag.NewFlagSet("hetworker", flag.ExitOnError)
	fs.StringVar(&p.System, "system", "quicmq", "quicmq or nats")
	fs.StringVar(&p.NS, "ns", "", "network namespace of the loss rule")
	fs.BoolVar(&p.Bad, "bad", false, "the last connection goes through the bad path")
	fs.StringVar(&p.ProfileName, "profile-name", "run", "--window-profile's file names: NAME-node.pprof, NAME-idle.pprof")
	p.flags(fs)
	p.Idle.workerFlags(fs)
	fs.Parse(args)
	p.Size = max(p.Size, 17)
	if p.Conns < 2 || p.Rate < 1 {
		return fmt.Errorf("--conns %d --rate %d: want at least 2 connections and 1 record/s", p.Conns, p.Rate)
	}
	if p.System != "quicmq" && p.System != "nats" {
		return fmt.Errorf("system %q: want quicmq or nats", p.System)
	}
	hotArgs := p.Idle.hotArgs()
	if p.System == "quicmq" && len(hotArgs) == 0 {
		// Its /debug/pprof/ for the heap and GC count (and --window-profile), as with idle
		// mirrored topics, so that every arm serves it.
		hotArgs = []string{"--metrics", idleHotMetrics}
	}
	b, sys, stop, err := startFan(p.System, hotArgs...)
	if err != nil {
		return err
	}
	defer stop()
	var idleSecs float64
	var peer *brokerProc
	if p.Idle.on() {
		var secs float64
		if peer, secs, err = p.Idle.start(b.dir); err != nil {
			return err
		}
		defer peer.stop()
		idleSecs = secs
	}
	conns, addr, closeRelay, err := hetPaths(p)
	if err != nil {
		return err
	}
	defer closeRelay()
	var clean, bad latHist
	// The clean connections' latencies by second of the window their record was sent in:
	// a p99 over the whole window is set by its worst second or two (a GC, a stall), the
	// median of the seconds' p99s by what the window does most of the time.
	perSec := make([]latHist, max(1, int(math.Ceil(p.Duration.Seconds()))))
	var winFrom atomic.Int64
	deliver := func(conn, _ int, payload []byte) {
		if len(payload) < 17 || payload[16] != 1 {
			return // the topic's first record, or published outside the window
		}
		lat := time.Now().UnixNano() - int64(binary.BigEndian.Uint64(payload))
		if p.Bad && conn == 0 {
			bad.add(lat)
		} else {
			clean.add(lat)
			perSec[secondOf(int64(binary.BigEndian.Uint64(payload)), winFrom.Load(), len(perSec))].add(lat)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := sys.connect(ctx, conns, conns, addr, deliver); err != nil {
		return fmt.Errorf("%s: connect: %w", p.System, err)
	}
	ns, err := hetBadPath(p)
	if err != nil {
		return err
	}
	res := &hetResult{hetParams: p, IdleSetupSeconds: idleSecs}
	start := time.Now()
	winStart, winEnd := start.Add(p.Warmup), start.Add(p.Warmup+p.Duration)
	winFrom.Store(winStart.UnixNano())
	res.PublishedPerSecond = make([]int, len(perSec))
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	mach0 := readMachineTicks()
	cpu0 := brokerCPU(b.pid())
	var idleCPU0 time.Duration
	if peer != nil {
		idleCPU0 = brokerCPU(peer.pid())
	}
	var gc0 int64
	if p.System == "quicmq" {
		var heap float64
		if gc0, heap, _, err = nodeHeap(idleHotMetrics); err != nil {
			res.Notes = append(res.Notes, err.Error())
		}
		res.NodeHeapStartMiB = heap
	}
	profiled := func() []string { return nil }
	if p.WindowProfile != "" && p.System == "quicmq" {
		profiled = windowProfiles(p.WindowProfile, p.ProfileName, p.Idle, peer != nil, p.Warmup+p.Duration)
	}
	hetPublish(ctx, sys, p, res, start, winStart, winEnd)
	var ms1 runtime.MemStats
	runtime.ReadMemStats(&ms1)
	res.MachineBusyPct, res.MachineStealPct = mach0.to(readMachineTicks())
	res.WorkerGCs, res.WorkerGCPauseMs = int64(ms1.NumGC-ms0.NumGC), float64(ms1.PauseTotalNs-ms0.PauseTotalNs)/1e6
	res.WorkerGCSeconds = gcSeconds(ms1.PauseEnd[:], start, winStart, winEnd)
	if p.System == "quicmq" {
		if gc1, _, ends, err := nodeHeap(idleHotMetrics); err == nil {
			res.NodeGCs = gc1 - gc0
			res.NodeGCSeconds = gcSeconds(ends, start, winStart, winEnd)
		}
	}
	res.Notes = append(res.Notes, profiled()...)
	cleanConns := int64(p.Conns - 1)
	res.CleanExpected = int64(res.Published) * cleanConns
	if p.Bad {
		res.BadExpected = int64(res.Published)
	}
	drainEnd := time.Now().Add(p.Drain)
	for (clean.count() < res.CleanExpected || bad.count() < res.BadExpected) && time.Now().Before(drainEnd) {
		time.Sleep(10 * time.Millisecond)
	}
	res.CleanDelivered, res.BadDelivered = clean.count(), bad.count()
	if d := res.CleanDelivered + res.BadDelivered; d > 0 {
		res.BrokerCPUus = float64(brokerCPU(b.pid())-cpu0) / float64(time.Microsecond) / float64(d)
		if peer != nil {
			res.IdleNodeCPUus = float64(brokerCPU(peer.pid())-idleCPU0) / float64(time.Microsecond) / float64(d)
		}
	}
	res.quantiles(&clean, &bad)
	res.perSecond(perSec)
	if ns != nil {
		res.DroppedPackets, _ = ns.Dropped()
		ns.SetLoss(0)
	}
	res.LoadAvg = loadAvg()
	if p.Idle.on() {
		g, err := p.Idle.hotGauges()
		if err != nil {
			res.Notes = append(res.Notes, err.Error())
		}
		res.IdleStreamsEnd = g.streams + g.waiting
	}
	sys.close()
	res.Notes = append(res.Notes, sys.notes()...)
	return json.NewEncoder(os.Stdout).Encode(res)
}

// gcSplit is the median p99 of the window's seconds in which the node or the worker ended a
// GC, and of those in which neither did (0 when there are none).
func (res *hetResult) gcSplit() (withGC, without float64) {
	gc := make(map[int]bool)
	for _, i := range append(slices.Clone(res.NodeGCSeconds), res.WorkerGCSeconds...) {
		gc[i] = true
	}
	var a, b []float64
	for i, v := range res.CleanP99PerSecond {
		if v <= 0 {
			continue
		}
		if gc[i] {
			a = append(a, v)
		} else {
			b = append(b, v)
		}
	}
	return median(a).med, median(b).med
}

// secondOf is the second of the window, from 0 to n-1, of a record of the window sent at
// sentNs (its payload's wall-clock time) in a window from winFromNs. The publisher and the
// subscribers both place a record with it, from the same numbers. With the publisher placing
// by time.Time.Sub (the monotonic reading) and the subscribers by the wall clock, runs at
// load 15-20 had seconds short of records while the window's total was complete (a
// time.Time's two readings are two reads of two clocks).
func secondOf(sentNs, winFromNs int64, n int) int {
	return min(max(int((sentNs-winFromNs)/int64(time.Second)), 0), n-1)
}

// perSecond sets the clean connections' p99 of each second of the window, their median and
// their worst.
func (res *hetResult) perSecond(perSec []latHist) {
	clean := int64(res.Conns - 1)
	res.CleanP99PerSecond = make([]float64, len(perSec))
	res.CleanPerSecond = make([]int64, len(perSec))
	for i := range perSec {
		res.CleanPerSecond[i] = perSec[i].count()
	}
	for i := range perSec {
		if i >= len(res.PublishedPerSecond) || res.PublishedPerSecond[i] == 0 {
			continue
		}
		res.CleanP99PerSecond[i] = finite(perSec[i].quantile(0.99, int64(res.PublishedPerSecond[i])*clean))
	}
	var vs []float64
	for _, v := range res.CleanP99PerSecond {
		if v < 0 {
			v = math.Inf(1)
		}
		vs = append(vs, v)
	}
	m := median(vs)
	res.CleanP99SecMedian, res.CleanP99SecMax = finite(m.med), finite(m.hi)
}

// hetBadPath drops p.BadLoss of the bad path's packets (the relay's hops in namespace p.NS)
// when the run has one; nil when it has none.
func hetBadPath(p hetParams) (*lossy.Namespace, error) {
	if !p.Bad || p.NS == "" || p.BadLoss <= 0 {
		return nil, nil
	}
	ns := &lossy.Namespace{Name: p.NS}
	match := lossy.UDPRelayHops
	if p.System != "quicmq" {
		match = lossy.TCPRelayHops
	}
	if err := ns.SetLossMatch(p.BadLoss, p.Idle.lossMatch(match)); err != nil {
		return nil, err
	}
	return ns, nil
}

// quantiles sets the run's latency quantiles from what the clean and the bad connections
// received, against what each was expected to.
func (res *hetResult) quantiles(clean, bad *latHist) {
	res.CleanP50 = finite(clean.quantile(0.5, res.CleanExpected))
	res.CleanP99 = finite(clean.quantile(0.99, res.CleanExpected))
	res.CleanP999 = finite(clean.quantile(0.999, res.CleanExpected))
	if res.Bad {
		res.BadP50 = finite(bad.quantile(0.5, res.BadExpected))
		res.BadP99 = finite(bad.quantile(0.99, res.BadExpected))
	}
}

// hetPaths is how many connections the run subscribes with and the address each dials:
// the broker's, except connection 0 on a bad run, which goes through a relay adding half
// of --bad-rtt each way (UDP for QuicMQ, TCP for NATS). closeRelay closes that relay.
func hetPaths(p hetParams) (conns int, addr func(int) string, closeRelay func(), err error) {
	conns, closeRelay = p.Conns-1, func() {}
	addr = func(int) string { return brokerAddr(p.System) }
	if !p.Bad {
		return conns, addr, closeRelay, nil
	}
	var badAddr string
	if p.System == "quicmq" {
		r, err := lossy.NewRelay(quicmqAddr, p.BadRTT/2)
		if err != nil {
			return 0, nil, nil, err
		}
		badAddr, closeRelay = r.Addr(), func() { r.Close() }
	} else {
		r, err := lossy.NewTCPRelay(natsAddr, p.BadRTT/2)
		if err != nil {
			return 0, nil, nil, err
		}
		badAddr, closeRelay = r.Addr(), func() { r.Close() }
	}
	return p.Conns, func(c int) string {
		if c == 0 {
			return badAddr
		}
		return brokerAddr(p.System)
	}, closeRelay, nil
}

// hetPublish publishes at --rate, each millisecond whatever is due, until the window ends;
// records sent in the window are marked (byte 16) and counted.
func hetPublish(ctx context.Context, sys fanSys, p hetParams, res *hetResult, start, winStart, winEnd time.Time) {
	var k int
	var pubErr error
	for pubErr == nil {
		now := time.Now()
		if !now.Before(winEnd) {
			break
		}
		for due := int(now.Sub(start).Seconds()*float64(p.Rate)) + 1; k < due && pubErr == nil; k++ {
			payload := make([]byte, p.Size)
			t := time.Now()
			binary.BigEndian.PutUint64(payload, uint64(t.UnixNano()))
			binary.BigEndian.PutUint64(payload[8:], uint64(k))
			if !t.Before(winStart) && t.Before(winEnd) {
				payload[16] = 1
				res.Published++
				res.PublishedPerSecond[secondOf(t.UnixNano(), winStart.UnixNano(), len(res.PublishedPerSecond))]++
			}
			pubErr = sys.publish(ctx, payload)
		}
		time.Sleep(time.Millisecond)
	}
	if pubErr != nil {
		res.Notes = append(res.Notes, fmt.Sprintf("publish failed: %v", pubErr))
	}
}

// runHetero is the "hetero" command.
func runHetero(args []string) error {
	fs := flag.NewFlagSet("hetero", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: qmqbench hetero [flags]

One topic, one subscription on each of --conns subscriber connections; one connection
behind a bad path (--bad-loss loss each way and --bad-rtt added round trip, through a
delaying relay in the run's namespace: UDP for QuicMQ, TCP for NATS; the loss rule drops
packets on the relay's hops only), the others clean. Each repeat runs every system twice:
without the bad connection (the clean ones alone) and with it. Reported: the clean
connections' p99 with against without (goal: within 10%%), and the bad one's own figures.
For NATS the relay delays bytes, not segments: a lost segment costs what it costs on
loopback TCP (an RTO of at least 200 ms or a fast retransmit), not a 50 ms round trip.

`)
		fs.PrintDefaults()
	}
	var p hetParams
	p.flags(fs)
	systemsFlag := fs.String("systems", "quicmq,nats", "systems, comma-separated: quicmq, nats")
	repeat := fs.Int("repeat", 1, "repetitions (medians are reported)")
	out := fs.String("out", defaultOut, "directory for JSON results and PNG plots")
	idleFlag := fs.String("idle-mirrored", "0", "idle mirrored topics beside the hot one, counts comma-separated (e.g. 0,10000): each repeat runs each system with each count, alternating; above 0 a second region's node creates that many topics, mirrored into the node under test and parked before the window (QuicMQ only; issue 34, idlemirror.go)")
	idleSettle := fs.Duration("idle-settle", 30*time.Second, "with idle mirrored topics: how long they stay idle, every mirror parked, before the window (the catch-up's garbage collected and its writes compacted)")
	fs.Parse(args)
	systems := strings.Split(*systemsFlag, ",")
	for _, s := range systems {
		if s != "quicmq" && s != "nats" {
			return fmt.Errorf("--systems: %q: want quicmq or nats", s)
		}
	}
	idles, err := parseIdleCounts(*idleFlag)
	if err != nil {
		return fmt.Errorf("--idle-mirrored: %w", err)
	}
	if err := checkIdleSystems(idles, systems); err != nil {
		return err
	}
	if p.WindowProfile, err = profileDir(p.WindowProfile); err != nil {
		return err
	}
	if p.Conns < 2 || p.Rate < 1 || p.BadLoss < 0 || p.BadLoss > 1 {
		return fmt.Errorf("--conns %d --rate %d --bad-loss %v: want at least 2 connections, 1 record/s, a loss in [0, 1]", p.Conns, p.Rate, p.BadLoss)
	}
	if err := lossy.Check(); err != nil {
		return fmt.Errorf("%w; this scenario needs the lossy-network harness and is skipped", err)
	}
	if stale, _ := lossy.RemoveStale(); len(stale) > 0 {
		fmt.Fprintf(os.Stderr, "removed namespaces left by killed runs: %v\n", stale)
	}
	slot, stop := killOnSignal()
	defer stop()
	var results []*hetResult
	total := *repeat * len(systems) * len(idles) * 2
	started := time.Now()
	for r := 1; r <= *repeat; r++ {
		for _, sys := range systems {
			for _, idle := range idleOrder(idles, r) {
				for _, badRun := range []bool{false, true} {
					q := p
					q.System, q.Bad = sys, badRun
					q.Idle.set(idle)
					q.Idle.Settle = *idleSettle
					q.ProfileName = fmt.Sprintf("%s-bad%v-idle%v-r%d", sys, badRun, idle, r)
					what := fmt.Sprintf("%d clean connections", p.Conns-1)
					if badRun {
						what += fmt.Sprintf(" + 1 behind %.1f%% loss and %v", p.BadLoss*100, p.BadRTT)
					}
					if idle.Mesh {
						what += fmt.Sprintf(", %d idle mirrored topics (idle region's node running)", idle.N)
					}
					fmt.Fprintf(os.Stderr, "[%d/%d %s] repeat %d: %s, %s ...", len(results)+1, total, time.Since(started).Round(time.Second), r, sys, what)
					var res hetResult
					if err := hetOnce(q, slot, &res); err != nil {
						fmt.Fprintf(os.Stderr, " failed: %v\n", err)
						continue
					}
					res.Repeat = r
					fmt.Fprintf(os.Stderr, " clean p50 %.2f p99 %.1f p999 %.1f ms (%d/%d), p99 by second median %.1f max %.1f ms", res.CleanP50, res.CleanP99, res.CleanP999, res.CleanDelivered, res.CleanExpected, res.CleanP99SecMedian, res.CleanP99SecMax)
					if badRun {
						fmt.Fprintf(os.Stderr, "; bad p50 %.1f p99 %.1f ms (%d/%d), %d packets dropped", res.BadP50, res.BadP99, res.BadDelivered, res.BadExpected, res.DroppedPackets)
					}
					if sys == "quicmq" {
						fmt.Fprintf(os.Stderr, ", node %.0f cpu-µs a delivery, heap %.0f MiB, %d GCs", res.BrokerCPUus, res.NodeHeapStartMiB, res.NodeGCs)
						fmt.Fprintf(os.Stderr, ", worker %d GCs; node GCs in seconds %v, worker's %v; machine %.0f%% busy, %.1f%% stolen", res.WorkerGCs, res.NodeGCSeconds, res.WorkerGCSeconds, res.MachineBusyPct, res.MachineStealPct)
					}
					fmt.Fprintf(os.Stderr, ", load %.1f %v\n", res.LoadAvg, res.Notes)
					results = append(results, &res)
				}
			}
		}
	}
	path, err := saveResults(*out, "hetero", results)
	if err != nil {
		return err
	}
	labels, values := printHetero(results, systems, idles)
	if err := plotBars(fmt.Sprintf("clean subscribers' p99 ms, without / with one bad path (%.0f%% loss, %v)", p.BadLoss*100, p.BadRTT), "p99 ms", labels, values, path); err != nil {
		return err
	}
	return nil
}

// printHetero prints the table (medians over repeats, the ratio within each repeat) and
// returns the plot's bars.
func printHetero(rs []*hetResult, systems []string, idles []idleArm) ([]string, []float64) {
	var labels []string
	var values []float64
	fmt.Println("| system | clean p99 ms without the bad one | with it | with/without (goal <= 1.10) | clean p50 without / with | clean p999 without / with | bad one's p50 / p99 ms | bad one's records | packets dropped |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, sys := range systems {
		for _, idle := range idles {
			label := sys
			if idle.Mesh {
				label = fmt.Sprintf("%s, %v idle mirrored", sys, idle)
			}
			var without, with, ratios, p50a, p50b, p999a, p999b, badP50, badP99, badShare, dropped []float64
			for _, a := range rs {
				if a.System != sys || a.Bad || a.Idle.arm() != idle {
					continue
				}
				without, p50a, p999a = append(without, a.CleanP99), append(p50a, a.CleanP50), append(p999a, a.CleanP999)
				for _, w := range rs {
					if w.System == sys && w.Bad && w.Repeat == a.Repeat && w.Idle.arm() == idle {
						with, p50b, p999b = append(with, w.CleanP99), append(p50b, w.CleanP50), append(p999b, w.CleanP999)
						if a.CleanP99 > 0 && w.CleanP99 >= 0 {
							ratios = append(ratios, w.CleanP99/a.CleanP99)
						}
						badP50, badP99 = append(badP50, w.BadP50), append(badP99, w.BadP99)
						badShare = append(badShare, float64(w.BadDelivered)/float64(max(w.BadExpected, 1)))
						dropped = append(dropped, float64(w.DroppedPackets))
					}
				}
			}
			if len(without) == 0 {
				continue
			}
			fmt.Printf("| %s | %v | %v | %v | %v / %v | %v / %v | %v / %v | %v | %v |\n", label, median(without), median(with), median(ratios),
				median(p50a), median(p50b), median(p999a), median(p999b), median(badP50), median(badP99),
				fmt.Sprintf("%.1f%%", 100*median(badShare).med), median(dropped))
			labels = append(labels, label+" without", label+" with")
			values = append(values, median(without).med, median(with).med)
		}
	}
	fmt.Println("\n(-1: the quantile falls among records that never arrived within the drain)")
	printHeteroIdle(rs, systems, idles)
	printHeteroRepeats(rs, systems, idles)
	return labels, values
}

// printHeteroRepeats prints every run of each repeat in the order it ran, with its clean p99 and node CPU over the same repeat's run without idle
// mirrored topics (the ratios printHeteroIdle takes the median of), its node's heap when the
// publishing started and its GCs to the end of the window.
func printHeteroRepeats(rs []*hetResult, systems []string, idles []idleArm) {
	fmt.Println()
	fmt.Println("| repeat | system | bad connection | idle mirrored topics | clean p50 ms | clean p99 ms | p99 over 0 | clean p99 by second: median / max ms | median second over 0 | node cpu-µs per delivery | cpu over 0 | idle node cpu-µs per delivery | node heap at start MiB | node GCs in warm-up and window | worker GCs | median second's p99 with a GC / without ms | machine busy / stolen % | load |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	over := func(a *hetResult, f func(*hetResult) float64) string {
		for _, b := range rs {
			if b.System == a.System && b.Bad == a.Bad && b.Repeat == a.Repeat && b.Idle.arm() == (idleArm{}) && f(b) > 0 && f(a) > 0 {
				return fmtNum(f(a) / f(b))
			}
		}
		return "-"
	}
	for _, sys := range systems {
		for _, a := range rs {
			if a.System != sys {
				continue
			}
			withGC, without := a.gcSplit()
			fmt.Printf("| %d | %s | %v | %v | %s | %s | %s | %s / %s | %s | %s | %s | %s | %s | %d | %d | %s / %s | %.0f / %.1f | %.1f |\n", a.Repeat, sys, a.Bad, a.Idle.arm(),
				fmtNum(a.CleanP50), fmtNum(a.CleanP99), over(a, func(r *hetResult) float64 { return r.CleanP99 }),
				fmtNum(a.CleanP99SecMedian), fmtNum(a.CleanP99SecMax), over(a, func(r *hetResult) float64 { return r.CleanP99SecMedian }),
				fmtNum(a.BrokerCPUus), over(a, func(r *hetResult) float64 { return r.BrokerCPUus }),
				fmtNum(a.IdleNodeCPUus), fmtNum(a.NodeHeapStartMiB), a.NodeGCs, a.WorkerGCs, fmtNum(withGC), fmtNum(without), a.MachineBusyPct, a.MachineStealPct, a.LoadAvg)
		}
	}
	fmt.Println("\nin the order run; over 0: the same repeat's run with no idle region, same bad connection")
}

// hetOnce runs one hetero measurement in a fresh namespace (and, with idle mirrored
// topics, the idle region's beside it).
func hetOnce(p hetParams, slot *workerSlot, res *hetResult) error {
	budget := p.Warmup + p.Duration + p.Drain + 3*time.Minute
	if p.Idle.on() {
		budget += idleSetupTimeout
	}
	closeIdle := func() {}
	defer func() { closeIdle() }()
	return workerInNS(p.System, budget, func(ns *lossy.Namespace) ([]string, error) {
		p.NS = ns.Name
		if p.Idle.on() {
			idle, closeNS, err := idlePeerNet(ns, p.Idle)
			if err != nil {
				return nil, err
			}
			p.Idle, closeIdle = idle, closeNS
		}
		return p.args(), nil
	}, res, slot)
}

// printHeteroIdle prints, for each idle arm, the clean connections' figures over the same
// repeat's without idle mirrored topics and, for a count of topics when the run has a mesh
// arm, over the mesh's (the hot topic's figures: goal within 10%), with the bad connection and
// without it.
func printHeteroIdle(rs []*hetResult, systems []string, idles []idleArm) {
	if len(idles) < 2 {
		return
	}
	fmt.Println()
	fmt.Println("| system | idle mirrored topics | over | bad connection | clean p50 | clean p99 (goal <= 1.10) | clean p999 | clean p99, median second | node cpu-µs per delivery | repeats | idle set-up s | streams open after |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, sys := range systems {
		for _, n := range idles {
			for _, base := range n.bases(idles) {
				for _, bad := range []bool{false, true} {
					var p50, p99, p999, p99sec, cpu, setup, open []float64
					for _, a := range rs {
						if a.System != sys || a.Bad != bad || a.Idle.arm() != n {
							continue
						}
						setup, open = append(setup, a.IdleSetupSeconds), append(open, a.IdleStreamsEnd)
						for _, b := range rs {
							if b.System == sys && b.Bad == bad && b.Idle.arm() == base && b.Repeat == a.Repeat && b.CleanP99 > 0 && a.CleanP99 > 0 {
								p50 = append(p50, a.CleanP50/b.CleanP50)
								p99 = append(p99, a.CleanP99/b.CleanP99)
								p999 = append(p999, a.CleanP999/b.CleanP999)
								if a.CleanP99SecMedian > 0 && b.CleanP99SecMedian > 0 {
									p99sec = append(p99sec, a.CleanP99SecMedian/b.CleanP99SecMedian)
								}
								if b.BrokerCPUus > 0 {
									cpu = append(cpu, a.BrokerCPUus/b.BrokerCPUus)
								}
							}
						}
					}
					if len(p99) == 0 {
						continue
					}
					fmt.Printf("| %s | %v | %v | %v | %v | %v | %v | %v | %v | %d | %v | %v |\n", sys, n, base, bad, median(p50), median(p99), median(p999), median(p99sec), median(cpu), len(p99), median(setup), median(open))
				}
			}
		}
	}
	fmt.Println("\nover: the run with the count named (0: no idle region; mesh: the idle region's node and no topic), same repeat; median (lowest-highest) over repeats")
}

// machineTicks are /proc/stat's first line: all cores' time, in ticks, by state.
type machineTicks struct{ total, idle, steal uint64 }

func readMachineTicks() machineTicks {
	b, _ := os.ReadFile("/proc/stat")
	line, _, _ := strings.Cut(string(b), "\n")
	return parseMachineTicks(line)
}

// parseMachineTicks reads /proc/stat's "cpu" line.
func parseMachineTicks(line string) machineTicks {
	var m machineTicks
	for i, f := range strings.Fields(line) {
		v, err := strconv.ParseUint(f, 10, 64)
		if i == 0 || err != nil || i > 8 { // cpu user nice system idle iowait irq softirq steal
			continue
		}
		m.total += v
		switch i {
		case 4, 5: // idle, iowait
			m.idle += v
		case 8:
			m.steal += v
		}
	}
	return m
}

// to is the share of the machine's time from m to n that was busy, and stolen, in percent.
func (m machineTicks) to(n machineTicks) (busy, steal float64) {
	d := float64(n.total - m.total)
	if d <= 0 {
		return 0, 0
	}
	return 100 * (d - float64(n.idle-m.idle)) / d, 100 * float64(n.steal-m.steal) / d
}

// gcSeconds are the seconds of the window [winStart, winEnd) in which the GCs ending at
// pauseEnd (unix ns, runtime.MemStats.PauseEnd's ring: 0 for none) ended; -1 for one in the
// warm-up, from start. In order.
func gcSeconds(pauseEnd []uint64, start, winStart, winEnd time.Time) []int {
	var out []int
	for _, e := range pauseEnd {
		t := time.Unix(0, int64(e))
		if e == 0 || t.Before(start) || !t.Before(winEnd) {
			continue
		}
		out = append(out, max(-1, int(math.Floor(t.Sub(winStart).Seconds()))))
	}
	slices.Sort(out)
	return out
}

// nodeHeap reads a node's garbage collections so far, its heap in use (MiB) and the end
// times of its last GCs (runtime.MemStats.PauseEnd) from /debug/pprof/heap?debug=1 at addr
// (the broker serves Go's profiles beside --metrics).
func nodeHeap(addr string) (numGC int64, heapMiB float64, pauseEnd []uint64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/debug/pprof/heap?debug=1", nil)
	if err != nil {
		return 0, 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("heap of %s: %w", addr, err)
	}
	defer resp.Body.Close()
	var seen int
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var v float64
		if _, err := fmt.Sscanf(sc.Text(), "# NumGC = %g", &v); err == nil {
			numGC, seen = int64(v), seen+1
		} else if _, err := fmt.Sscanf(sc.Text(), "# HeapAlloc = %g", &v); err == nil {
			heapMiB, seen = v/(1<<20), seen+1
		} else if list, ok := strings.CutPrefix(sc.Text(), "# PauseEnd = ["); ok {
			for _, f := range strings.Fields(strings.TrimSuffix(list, "]")) {
				if e, err := strconv.ParseUint(f, 10, 64); err == nil {
					pauseEnd = append(pauseEnd, e)
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, nil, fmt.Errorf("heap of %s: %w", addr, err)
	}
	if seen < 2 {
		return 0, 0, nil, fmt.Errorf("heap of %s: no NumGC or HeapAlloc line", addr)
	}
	return numGC, heapMiB, pauseEnd, nil
}
