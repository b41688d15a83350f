package main

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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quicmq/quicmq/bench/lossy"
)

// runParams is one run of the fan-out measurement: one system, one loss rate.
type runParams struct {
	System   string
	NS       string // the namespace the worker runs in (for the loss rule); "" = no loss control
	Loss     float64
	Rate     int // records per second, all topics together
	Subs     int
	Size     int
	Warmup   time.Duration
	Duration time.Duration
	Drain    time.Duration
	Slow     int // subscriptions (from 0) whose application stops reading after the warm-up
	// Wild subscriptions (from 0) subscribe to every topic ("fan.>"), a busy subscription
	// for the slow-consumer scenario. They and the slow ones are left out of the figures.
	Wild int
	// LossPath says which packets may be lost: "all" (every packet in the namespace, both
	// directions of both connections) or "delivery" (only packets the broker sends).
	LossPath string
	// Profile, when not empty, is a directory for a CPU profile of the broker.
	Profile string
	// WindowProfile, when not empty, is a directory for CPU profiles of the QuicMQ node under
	// test and, with idle mirrored topics, of the idle region's node, over the publishing
	// (warm-up and window), fetched from each node's /debug/pprof/profile: what the node
	// spends while the hot topics flow, without its start or the idle topics' catch-up
	// (idlemirror.go). ProfileName names the files: ProfileName-node.pprof, -idle.pprof.
	WindowProfile string
	ProfileName   string
	// Delay is a one-way delay added each way on the subscriber's connection by a userspace
	// UDP relay (lossy.Relay): QUIC systems only.
	Delay time.Duration
	// Idle are idle mirrored topics of another region beside the hot ones (idlemirror.go).
	Idle idleMirrors
}

func (p *runParams) flags(fs *flag.FlagSet) {
	fs.IntVar(&p.Rate, "rate", 5000, "records per second published, all topics together")
	fs.IntVar(&p.Subs, "subs", 100, "subscriptions (one topic each) on the one subscriber connection")
	fs.IntVar(&p.Size, "size", 128, "payload bytes (at least 16: send time and sequence)")
	fs.DurationVar(&p.Warmup, "warmup", time.Second, "publishing before the measured window")
	fs.DurationVar(&p.Duration, "duration", 10*time.Second, "measured window")
	fs.DurationVar(&p.Drain, "drain", 10*time.Second, "how long to wait after the window for records in flight")
	fs.StringVar(&p.Profile, "profile", "", "directory for CPU profiles of the brokers (SYSTEM-lossL-slowS.pprof)")
	fs.StringVar(&p.WindowProfile, "window-profile", "", "directory for CPU profiles of the QuicMQ node under test and of the idle region's node (--idle-mirrored) over each run's publishing, warm-up and window (SYSTEM-lossL-idleN-rR-node.pprof, ...-idle.pprof; read with 'go tool pprof -top FILE')")
	fs.DurationVar(&p.Delay, "delay", 0, "one-way delay added each way on the subscriber's connection by a userspace UDP relay (QuicMQ and its ablation only; loss also applies to the relay's hops)")
	fs.StringVar(&p.LossPath, "loss-path", "all", `which packets may be lost: "all" (both directions of both connections) or "delivery" (only packets the broker sends: records to the subscriber, acks to the publisher)`)
}

func (p runParams) args() []string {
	a := []string{"--system", p.System, "--ns", p.NS, "--loss", fmt.Sprint(p.Loss),
		"--rate", fmt.Sprint(p.Rate), "--subs", fmt.Sprint(p.Subs), "--size", fmt.Sprint(p.Size),
		"--warmup", p.Warmup.String(), "--duration", p.Duration.String(), "--drain", p.Drain.String(),
		"--slow", fmt.Sprint(p.Slow), "--wild", fmt.Sprint(p.Wild), "--loss-path", p.LossPath, "--profile", p.Profile,
		"--delay", p.Delay.String(), "--window-profile", p.WindowProfile, "--profile-name", p.ProfileName}
	return append(a, p.Idle.args()...)
}

// runResult is what a worker reports for one run (times in milliseconds).
type runResult struct {
	runParams
	Repeat         int
	Sent           int // records published in the window
	Received       int // of those, received by the subscriptions that kept reading
	Missing        int // published in the window, never received by a reading subscription
	PubRate        float64
	P50, P99, P999 float64
	Max            float64
	// Per subscription (reading ones): the longest gap between two records beyond the
	// publish interval, and the number of such gaps over 50 ms.
	LongestStall   float64
	MedianLongest  float64
	Stalls         int
	SubsStalled    int
	PerSubLongest  []float64
	StallEvents    [][3]float64 // subscription, seconds into the window, stall ms
	CDF            [][2]float64 // latency ms, quantile
	DroppedPackets int64
	BrokerRSSStart float64
	BrokerRSSMax   float64
	BrokerRSSEnd   float64
	// CPU time of the broker (utime+stime from /proc, 10 ms ticks) from the first publish
	// to the end of the drain (warm-up included), and of the idle region's node over the same
	// time (idlemirror.go).
	BrokerCPUms      float64
	BrokerCPUus      float64 // BrokerCPUms per record published (each goes to one subscription)
	IdleNodeCPUms    float64 `json:",omitempty"`
	IdleNodeCPUus    float64 `json:",omitempty"` // IdleNodeCPUms per record published
	SlowReceived     int     // records the stalled subscriptions took before stopping
	ClientRSSMax     float64 // the worker (both clients) at its largest, MiB
	Notes            []string
	LoadAvg          float64 // the machine's 1-minute load average at the end of the run
	SetupSeconds     float64
	SubscribeSeconds float64
	// With idle mirrored topics: how long their creation, listing and parking took before
	// the run, and the mirror streams open or waiting on the node's link after it.
	IdleSetupSeconds float64 `json:",omitempty"`
	IdleStreamsEnd   float64 `json:",omitempty"`
	Late, LateMs     float64 // share of records above LateMs, the late threshold (fanoutlate.go)
	// Every record's latency, ms, sorted, rounded to 10 µs: the late share is counted against
	// a threshold shared with the other systems of the same loss rate and repeat.
	Lat []float64 `json:",omitempty"`
}

type sample struct{ sent, arrived int64 }

// runWorker is the hidden "worker" command: it runs inside the scenario's namespace,
// starts the broker as its child, measures one run and prints its runResult as JSON.
func runWorker(args []string) error {
	var p runParams
	fs := flag.NewFlagSet("worker", flag.ExitOnError)
	fs.StringVar(&p.System, "system", "quicmq", "system under test")
	fs.StringVar(&p.NS, "ns", "", "network namespace of the loss rule")
	fs.Float64Var(&p.Loss, "loss", 0, "packet loss, fraction")
	fs.IntVar(&p.Slow, "slow", 0, "subscriptions that stop reading")
	fs.IntVar(&p.Wild, "wild", 0, "subscriptions to every topic")
	fs.StringVar(&p.ProfileName, "profile-name", "run", "--window-profile's file names: NAME-node.pprof, NAME-idle.pprof")
	p.flags(fs)
	p.Idle.workerFlags(fs)
	fs.Parse(args)
	res, err := measure(p)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

func measure(p runParams) (*runResult, error) {
	if p.Size < 16 {
		p.Size = 16
	}
	kind, extra := brokerKind(p.System)
	if kind == "" {
		return nil, fmt.Errorf("unknown system %q", p.System)
	}
	setupStart := time.Now()
	if p.Profile != "" {
		extra = append(extra, "--cpuprofile", fmt.Sprintf("%s/%s-loss%.1f-slow%d.pprof", p.Profile, p.System, p.Loss*100, p.Slow))
	}
	hotArgs := p.Idle.hotArgs()
	if p.WindowProfile != "" && kind == "quicmq" && len(hotArgs) == 0 {
		extra = append(extra, "--metrics", idleHotMetrics) // its /debug/pprof/ for the profile
	}
	b, err := startBroker(kind, append(extra, hotArgs...)...)
	if err != nil {
		return nil, err
	}
	defer b.stop()
	r := newFanoutRun(p, b)
	var idleSecs float64
	if p.Idle.on() {
		peer, secs, err := p.Idle.start(b.dir)
		if err != nil {
			return nil, err
		}
		defer peer.stop()
		idleSecs, r.idlePeer = secs, peer
	}
	sys, err := newSystem(p.System, b.dir)
	if err != nil {
		return nil, err
	}
	defer sys.close()
	r.sys = sys
	if p.Delay > 0 {
		q, ok := sys.(*quicmqSys)
		if !ok {
			return nil, fmt.Errorf("--delay: the relay carries UDP only: QuicMQ and its ablation, not %s", p.System)
		}
		relay, err := lossy.NewRelay(quicmqAddr, p.Delay)
		if err != nil {
			return nil, fmt.Errorf("--delay: %w", err)
		}
		defer relay.Close()
		q.subAddr = relay.Addr()
	}
	defer r.unblock() // slow subscriptions blocked in deliver, on every return
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := r.subscribe(ctx)
	if err != nil {
		return nil, err
	}
	res.IdleSetupSeconds = idleSecs
	ns, err := r.setLoss()
	if err != nil {
		return nil, err
	}
	res.SetupSeconds = time.Since(setupStart).Seconds()

	stopSampling := r.sampleMemory(res)
	profiled := r.profileWindow(kind, res)
	r.publish(ctx, res)
	profiled()
	r.drain(ctx, res)
	stopSampling()
	r.finish(res, ns)
	return res, nil
}

// fanoutRun is one run of the fan-out scenario against one broker: what its subscriptions
// received, per subscription, and the window the publisher measures.
type fanoutRun struct {
	p        runParams
	b        *brokerProc
	idlePeer *brokerProc // the idle mirrored region's node, with --idle-mirrored
	sys      system

	samples  [][]sample     // per subscription, written only by its delivering goroutine
	inWin    []atomic.Int64 // records of the window received, per subscription
	slowGot  []int          // records each slow subscription took before it stopped
	slowFrom atomic.Int64   // unix ns after which slow subscriptions stop; 0: not yet
	release  chan struct{}  // closed at the end: slow subscriptions' deliver returns
	released bool
	winFrom  atomic.Int64
	winTo    atomic.Int64

	start, winStart, winEnd time.Time
	sentPerSub              []int
	k                       int // records published, warm-up included
	cpu0, idleCPU0          time.Duration
}

func newFanoutRun(p runParams, b *brokerProc) *fanoutRun {
	return &fanoutRun{p: p, b: b, samples: make([][]sample, p.Subs), inWin: make([]atomic.Int64, p.Subs),
		slowGot: make([]int, p.Slow), release: make(chan struct{}), sentPerSub: make([]int, p.Subs)}
}

func (r *fanoutRun) unblock() {
	if !r.released {
		r.released = true
		close(r.release)
	}
}

// deliver is every subscription's callback: a record's payload begins with its send time.
func (r *fanoutRun) deliver(sub int, payload []byte) {
	now := time.Now().UnixNano()
	if len(payload) < 16 {
		return // the warm-up record that created the topic
	}
	if sub < r.p.Slow {
		if f := r.slowFrom.Load(); f != 0 && now > f {
			<-r.release // the application stopped reading this subscription
			return
		}
		r.slowGot[sub]++
	}
	sent := int64(binary.BigEndian.Uint64(payload))
	r.samples[sub] = append(r.samples[sub], sample{sent, now})
	if sent >= r.winFrom.Load() && sent < r.winTo.Load() {
		r.inWin[sub].Add(1)
	}
}

// subscribe sets up the subscriptions (the first --wild of them on fan.>) and starts the
// result with the time that took.
func (r *fanoutRun) subscribe(ctx context.Context) (*runResult, error) {
	subStart := time.Now()
	patterns := make([]string, r.p.Subs)
	for i := range patterns {
		patterns[i] = topicName(i)
		if i < r.p.Wild {
			patterns[i] = "fan.>"
		}
	}
	if err := r.sys.setup(ctx, patterns, r.deliver); err != nil {
		return nil, fmt.Errorf("%s: setup: %w", r.p.System, err)
	}
	return &runResult{runParams: r.p, SubscribeSeconds: time.Since(subStart).Seconds()}, nil
}

// setLoss sets the namespace's random drops on the path --loss-path names; nil without a
// namespace.
func (r *fanoutRun) setLoss() (*lossy.Namespace, error) {
	p := r.p
	if p.NS == "" {
		return nil, nil
	}
	ns := &lossy.Namespace{Name: p.NS}
	match := ""
	switch p.LossPath {
	case "all", "":
	case "delivery":
		match = "th sport { 7400, 4222 }" // the brokers' ports: see quicmqAddr, natsAddr
	default:
		return nil, fmt.Errorf("--loss-path %q: want all or delivery", p.LossPath)
	}
	if p.Delay > 0 { // the relay is in this namespace: its hops meet the loss once
		match = strings.TrimSpace(match + " " + lossy.ExceptRelays)
	}
	if err := ns.SetLossMatch(p.Loss, p.Idle.lossMatch(match)); err != nil {
		return nil, err
	}
	return ns, nil
}

// sampleMemory records the broker's and this process's peak RSS every 250 ms, and the CPU
// counters the run's CPU is measured from, until the returned function is called.
func (r *fanoutRun) sampleMemory(res *runResult) (stop func()) {
	res.BrokerRSSStart = rssMiB(r.b.pid())
	r.cpu0 = brokerCPU(r.b.pid())
	if r.idlePeer != nil {
		r.idleCPU0 = brokerCPU(r.idlePeer.pid())
	}
	peaks := rssPeaks(250*time.Millisecond, r.b.pid(), os.Getpid())
	return func() {
		p := peaks()
		res.BrokerRSSMax, res.ClientRSSMax = p[0], p[1]
	}
}

// profileWindow starts fetching, with --window-profile, a CPU profile of the QuicMQ node
// under test and of the idle region's node over the publishing about to begin (warm-up and
// window), and returns the function that waits for them; a failure is a note.
func (r *fanoutRun) profileWindow(kind string, res *runResult) (wait func()) {
	p := r.p
	if p.WindowProfile == "" || kind != "quicmq" {
		return func() {}
	}
	profiled := windowProfiles(p.WindowProfile, p.ProfileName, p.Idle, r.idlePeer != nil, p.Warmup+p.Duration)
	return func() { res.Notes = append(res.Notes, profiled()...) }
}

// windowProfiles fetches, over d from now, a CPU profile of the node under test (serving
// /debug/pprof/ at idleHotMetrics) into dir/NAME-node.pprof and, with idlePeer, of the idle
// region's node into dir/NAME-idle.pprof. wait waits for both and returns a note for each
// that failed.
func windowProfiles(dir, name string, idle idleMirrors, idlePeer bool, d time.Duration) (wait func() []string) {
	nodes := map[string]string{"node": idleHotMetrics}
	if idlePeer {
		nodes["idle"] = idle.AddrB + ":7490"
	}
	secs := max(1, int(math.Round(d.Seconds())))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var notes []string
	for which, addr := range nodes {
		wg.Go(func() {
			file := filepath.Join(dir, fmt.Sprintf("%s-%s.pprof", name, which))
			if err := fetchProfile(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs), file); err != nil {
				mu.Lock()
				notes = append(notes, fmt.Sprintf("profile of the %s: %v", which, err))
				mu.Unlock()
			}
		})
	}
	return func() []string {
		wg.Wait()
		return notes
	}
}

// publish publishes at the fixed rate, each millisecond whatever is due, through the
// warm-up and the window, then flushes.
func (r *fanoutRun) publish(ctx context.Context, res *runResult) {
	p := r.p
	r.start = time.Now()
	r.winStart = r.start.Add(p.Warmup)
	r.winEnd = r.winStart.Add(p.Duration)
	r.slowFrom.Store(r.winStart.UnixNano())
	r.winFrom.Store(r.winStart.UnixNano())
	r.winTo.Store(r.winEnd.UnixNano())
	var pubErr error
	for pubErr == nil {
		now := time.Now()
		if !now.Before(r.winEnd) {
			break
		}
		due := int(now.Sub(r.start).Seconds() * float64(p.Rate))
		for ; r.k < due && pubErr == nil; r.k++ {
			payload := make([]byte, p.Size)
			t := time.Now()
			binary.BigEndian.PutUint64(payload, uint64(t.UnixNano()))
			binary.BigEndian.PutUint64(payload[8:], uint64(r.k))
			i := r.k % p.Subs
			if !t.Before(r.winStart) && t.Before(r.winEnd) {
				r.sentPerSub[i]++
				res.Sent++
			}
			pubErr = r.sys.publish(ctx, i, payload)
		}
		time.Sleep(time.Millisecond)
	}
	if pubErr != nil {
		res.Notes = append(res.Notes, fmt.Sprintf("publish failed: %v", pubErr))
	}
	res.PubRate = float64(res.Sent) / p.Duration.Seconds()
	fctx, fcancel := context.WithTimeout(ctx, p.Drain)
	defer fcancel()
	if err := r.sys.flush(fctx); err != nil {
		res.Notes = append(res.Notes, fmt.Sprintf("flush: %v", err))
	}
}

// drain waits until every reading subscription has its window's records, or --drain ends.
func (r *fanoutRun) drain(ctx context.Context, res *runResult) {
	drainEnd := time.Now().Add(r.p.Drain)
	for time.Now().Before(drainEnd) && ctx.Err() == nil {
		done := true
		for i := r.p.skip(); i < r.p.Subs && done; i++ {
			done = r.inWin[i].Load() >= int64(r.sentPerSub[i])
		}
		if done {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// finish reads the broker's counters after the window, ends the loss and the
// subscriptions, and analyses what arrived.
func (r *fanoutRun) finish(res *runResult, ns *lossy.Namespace) {
	res.BrokerRSSEnd = rssMiB(r.b.pid())
	res.BrokerCPUms = float64(brokerCPU(r.b.pid())-r.cpu0) / float64(time.Millisecond)
	if r.k > 0 {
		res.BrokerCPUus = res.BrokerCPUms * 1000 / float64(r.k)
	}
	if r.idlePeer != nil {
		res.IdleNodeCPUms = float64(brokerCPU(r.idlePeer.pid())-r.idleCPU0) / float64(time.Millisecond)
		if r.k > 0 {
			res.IdleNodeCPUus = res.IdleNodeCPUms * 1000 / float64(r.k)
		}
	}
	if r.p.Idle.on() {
		g, err := r.p.Idle.hotGauges()
		if err != nil {
			res.Notes = append(res.Notes, err.Error())
		}
		res.IdleStreamsEnd = g.streams + g.waiting
	}
	res.LoadAvg = loadAvg()
	if ns != nil {
		res.DroppedPackets, _ = ns.Dropped()
		ns.SetLoss(0)
	}
	r.unblock()
	r.sys.close()
	res.Notes = append(res.Notes, r.sys.notes()...)
	for _, n := range r.slowGot {
		res.SlowReceived += n
	}
	analyse(res, r.samples, r.sentPerSub, r.winStart, r.winEnd)
}

// analyse computes latency quantiles and stalls over the reading subscriptions' records
// published in the window. It runs after every delivering goroutine ended.
func analyse(res *runResult, samples [][]sample, sentPerSub []int, winStart, winEnd time.Time) {
	p := res.runParams
	interval := float64(p.Subs) / float64(p.Rate) * 1000 // ms between two records of a topic
	var lat []float64
	for i := p.skip(); i < p.Subs; i++ {
		var prev int64
		longest := 0.0
		n := 0
		for _, s := range samples[i] {
			if s.sent < winStart.UnixNano() || s.sent >= winEnd.UnixNano() {
				continue
			}
			n++
			lat = append(lat, float64(s.arrived-s.sent)/1e6)
			if prev != 0 {
				stall := float64(s.arrived-prev)/1e6 - interval
				longest = max(longest, stall)
				if stall > 50 {
					res.Stalls++
					res.StallEvents = append(res.StallEvents, [3]float64{float64(i), float64(s.arrived-winStart.UnixNano()) / 1e9, stall})
				}
			}
			prev = s.arrived
		}
		if n < sentPerSub[i] {
			// Records never came: the subscription stalled from its last record (or the
			// window's start) to the end of the window at least.
			if prev == 0 {
				prev = winStart.UnixNano()
			}
			if stall := float64(winEnd.UnixNano()-prev)/1e6 - interval; stall > 0 {
				longest = max(longest, stall)
				if stall > 50 {
					res.Stalls++
					res.StallEvents = append(res.StallEvents, [3]float64{float64(i), p.Duration.Seconds(), stall})
				}
			}
		}
		res.Received += n
		res.Missing += max(0, sentPerSub[i]-n)
		res.PerSubLongest = append(res.PerSubLongest, longest)
		if longest > 50 {
			res.SubsStalled++
		}
	}
	if len(res.PerSubLongest) > 0 {
		s := slices.Clone(res.PerSubLongest)
		slices.Sort(s)
		res.LongestStall = s[len(s)-1]
		res.MedianLongest = s[len(s)/2]
	}
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	q := func(f float64) float64 { return lat[int(f*float64(len(lat)-1))] }
	res.P50, res.P99, res.P999, res.Max = q(0.5), q(0.99), q(0.999), lat[len(lat)-1]
	res.LateMs = lateThreshold(res.P50, p.Delay) // until shareLateThresholds compares systems
	res.Late = lateShare(lat, res.LateMs)
	res.Lat = make([]float64, len(lat))
	for i, v := range lat {
		res.Lat[i] = math.Round(v*100) / 100
	}
	for _, f := range cdfQuantiles() {
		res.CDF = append(res.CDF, [2]float64{q(f), f})
	}
}

// cdfQuantiles are the points kept for the latency plots: dense in the tail.
func cdfQuantiles() []float64 {
	var qs []float64
	for i := 0; i < 100; i++ {
		qs = append(qs, float64(i)/100)
	}
	for i := 1; i < 10; i++ {
		qs = append(qs, 0.99+float64(i)/1000)
	}
	for i := 1; i <= 10; i++ {
		qs = append(qs, 0.999+float64(i)/10000)
	}
	return qs
}

// loadAvg is the 1-minute load average: other work on the machine shows in the figures.
func loadAvg() float64 {
	b, _ := os.ReadFile("/proc/loadavg")
	var v float64
	fmt.Sscanf(string(b), "%f", &v)
	return v
}

// skip is how many leading subscriptions the figures leave out: the slow and the wild ones.
func (p runParams) skip() int { return max(p.Slow, p.Wild) }
