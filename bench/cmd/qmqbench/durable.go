package main

// Scenarios 3 (durable publish throughput) and 4 (replay from offset 0), QuicMQ against
// JetStream. No loss: each run still gets a namespace of its own, so that the brokers'
// fixed ports never meet another process's.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quicmq/quicmq/bench/lossy"
	"github.com/quicmq/quicmq/client"
)

type durParams struct {
	Mode       string // "publish" or "replay"
	System     string // quicmq, jetstream-sync, jetstream
	Publishers int
	Size       int
	Duration   time.Duration // publish: measured window (after one second of warm-up)
	Records    int           // replay: records stored, then read back
	// RawPebble (publish, quicmq): after the node's window, a raw Pebble synced-batch writer
	// in a process of its own, with the node's records per commit (rawpebble.go).
	RawPebble bool
}

func (p durParams) args() []string {
	return []string{"durworker", "--mode", p.Mode, "--system", p.System, "--publishers", fmt.Sprint(p.Publishers),
		"--size", fmt.Sprint(p.Size), "--duration", p.Duration.String(), "--records", fmt.Sprint(p.Records),
		"--raw-pebble=" + fmt.Sprint(p.RawPebble)}
}

type durResult struct {
	durParams
	Repeat       int
	Records      int     // acked in the window (publish) or read back (replay)
	Rate         float64 // records per second
	BrokerCPUus  float64 // broker CPU time (user + system) per record, µs
	LoadSeconds  float64 // replay: time to store the records
	Errors       int
	Notes        []string
	AckedDurable string // what an ack means for this system
	LoadAvg      float64
	// With RawPebble: the node's records per commit in its window, and the raw writer's
	// figures with that batch size (its own process's CPU).
	NodeRecordsPerCommit float64
	RawRate              float64
	RawCPUus             float64
	RawFsyncs            int64
	// With RawPebble: a QUIC sink in a process of its own taking the same records from this
	// process as fast as it can (quicsink.go): its CPU per record, the transport's share.
	SinkRate  float64
	SinkCPUus float64
}

var durableMeaning = map[string]string{
	"quicmq":         "after fsync (always)",
	"jetstream-sync": "after fsync (sync_always)",
	"jetstream":      "before fsync (default: fsync every 2 min)",
}

// brokerCPU is the broker process's CPU time so far.
func brokerCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	fs := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(fs) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(fs[11], 10, 64)
	st, _ := strconv.ParseInt(fs[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ is 100 on Linux
}

// runDurWorker is the hidden "durworker" command.
func runDurWorker(args []string) error {
	var p durParams
	fs := flag.NewFlagSet("durworker", flag.ExitOnError)
	fs.StringVar(&p.Mode, "mode", "publish", "publish or replay")
	fs.StringVar(&p.System, "system", "quicmq", "quicmq, jetstream-sync or jetstream")
	fs.IntVar(&p.Publishers, "publishers", 1, "publisher connections")
	fs.IntVar(&p.Size, "size", 1024, "payload bytes")
	fs.DurationVar(&p.Duration, "duration", 10*time.Second, "measured window")
	fs.IntVar(&p.Records, "records", 1000000, "replay: records")
	fs.BoolVar(&p.RawPebble, "raw-pebble", false, "publish, quicmq: then a raw Pebble writer with the node's batch size")
	fs.Parse(args)
	raw := p.RawPebble && p.Mode == "publish" && p.System == "quicmq"
	kind, extra := brokerKind(p.System)
	if kind == "" {
		return fmt.Errorf("unknown system %q", p.System)
	}
	if raw {
		extra = append(extra, "--metrics", nodeMetricsAddr)
	}
	b, err := startBroker(kind, extra...)
	if err != nil {
		return err
	}
	defer b.stop()
	res := &durResult{durParams: p, AckedDurable: durableMeaning[p.System]}
	d, err := newDurable(p.System, b.dir)
	if err != nil {
		return err
	}
	defer d.close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := d.connect(ctx, p.Publishers); err != nil {
		return err
	}
	switch p.Mode {
	case "publish":
		err = durPublish(ctx, d, b.pid(), p, raw, res)
	case "replay":
		err = durReplay(ctx, d, b.pid(), p, res)
	default:
		return fmt.Errorf("unknown mode %q", p.Mode)
	}
	if err != nil {
		return err
	}
	res.LoadAvg = loadAvg()
	return json.NewEncoder(os.Stdout).Encode(res)
}

// durPublish measures publishing: p.Publishers connections publish pipelined for a second,
// then for the window, counted; with raw, the node's records per commit, and a raw Pebble
// writer and a bare QUIC sink measured after it with the same load. pid is the broker's.
func durPublish(ctx context.Context, d durable, pid int, p durParams, raw bool, res *durResult) error {
	var err error
	var acked atomic.Int64
	var counting atomic.Bool
	var errs atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	payload := make([]byte, p.Size)
	for i := range p.Publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.publishUntil(ctx, i, payload, stop, func(err error) {
				if err != nil {
					errs.Add(1)
				} else if counting.Load() {
					acked.Add(1)
				}
			})
		}()
	}
	time.Sleep(time.Second)
	var recs0, commits0 float64
	if raw {
		if recs0, commits0, err = commitStats(nodeMetricsAddr); err != nil {
			return err
		}
	}
	cpu0, t0 := brokerCPU(pid), time.Now()
	counting.Store(true)
	time.Sleep(p.Duration)
	counting.Store(false)
	cpu1, el := brokerCPU(pid), time.Since(t0)
	if raw {
		recs1, commits1, err := commitStats(nodeMetricsAddr)
		if err != nil {
			return err
		}
		res.NodeRecordsPerCommit = (recs1 - recs0) / max(commits1-commits0, 1)
	}
	close(stop)
	wg.Wait()
	res.Records = int(acked.Load())
	res.Rate = float64(res.Records) / el.Seconds()
	if raw {
		r, err := runRawChild(rawParams{Writers: p.Publishers, Batch: max(int(res.NodeRecordsPerCommit+0.5), 1),
			Size: p.Size, Warmup: time.Second, Duration: p.Duration})
		if err != nil {
			return err
		}
		res.RawRate, res.RawCPUus, res.RawFsyncs = r.Rate, r.CPUus, r.Fsyncs
		sk, err := measureSink(p.Publishers, p.Size, time.Second, p.Duration)
		if err != nil {
			return err
		}
		res.SinkRate, res.SinkCPUus = sk.Rate, sk.CPUus
	}
	res.Errors = int(errs.Load())
	if res.Records > 0 {
		res.BrokerCPUus = float64(cpu1-cpu0) / float64(time.Microsecond) / float64(res.Records)
	}
	return nil
}

// durReplay stores p.Records records, then measures reading them back from offset 0.
func durReplay(ctx context.Context, d durable, pid int, p durParams, res *durResult) error {
	t0 := time.Now()
	if err := d.load(ctx, p.Records, make([]byte, p.Size)); err != nil {
		return err
	}
	res.LoadSeconds = time.Since(t0).Seconds()
	cpu0, t1 := brokerCPU(pid), time.Now()
	n, err := d.replay(ctx, p.Records)
	el := time.Since(t1)
	cpu1 := brokerCPU(pid)
	if err != nil {
		res.Notes = append(res.Notes, err.Error())
	}
	res.Records = n
	res.Rate = float64(n) / el.Seconds()
	if n > 0 {
		res.BrokerCPUus = float64(cpu1-cpu0) / float64(time.Microsecond) / float64(n)
	}
	return nil
}

// durable is a system seen by scenarios 3 and 4.
type durable interface {
	connect(ctx context.Context, publishers int) error
	// publishUntil publishes on connection i, pipelined, until stop; done is called per ack.
	publishUntil(ctx context.Context, i int, payload []byte, stop <-chan struct{}, done func(error))
	load(ctx context.Context, n int, payload []byte) error
	replay(ctx context.Context, n int) (int, error)
	close()
}

func newDurable(sys, dir string) (durable, error) {
	switch sys {
	case "quicmq":
		return &quicmqDur{ca: filepath.Join(dir, "data", "tls", "ca.pem")}, nil
	case "jetstream", "jetstream-sync":
		return &jsDur{}, nil
	}
	return nil, fmt.Errorf("system %q has no durable mode", sys)
}

type quicmqDur struct {
	ca    string
	conns []*client.Conn
}

func (q *quicmqDur) connect(ctx context.Context, n int) error {
	for range max(n, 1) {
		c, err := client.Dial(ctx, client.Options{CAFile: q.ca, Name: "bench"}, quicmqAddr)
		if err != nil {
			return err
		}
		q.conns = append(q.conns, c)
	}
	return nil
}

func (q *quicmqDur) publishUntil(ctx context.Context, i int, payload []byte, stop <-chan struct{}, done func(error)) {
	q.pipeline(ctx, i, "pub.bench", payload, func() bool {
		select {
		case <-stop:
			return false
		default:
			return true
		}
	}, done)
}

func (q *quicmqDur) load(ctx context.Context, n int, payload []byte) error {
	var once sync.Once
	var firstErr error
	q.pipeline(ctx, 0, "replay.bench", payload, func() bool { n--; return n >= 0 }, func(err error) {
		if err != nil {
			once.Do(func() { firstErr = err })
		}
	})
	return firstErr
}

// pipeline publishes payload to topic on connection i with PublishAsync while more says so,
// or until a publish fails; a second goroutine waits for the acks in order, calling done
// with each result (and done is called once with the failure of a publish).
func (q *quicmqDur) pipeline(ctx context.Context, i int, topic string, payload []byte, more func() bool, done func(error)) {
	futures := make(chan *client.Future, 4096)
	var wg sync.WaitGroup
	wg.Go(func() {
		for f := range futures {
			_, err := f.Wait(ctx)
			done(err)
		}
	})
	defer wg.Wait()
	defer close(futures)
	for more() {
		f, err := q.conns[i].PublishAsync(ctx, client.Message{Topic: topic, Payload: payload})
		if err != nil {
			done(err)
			return
		}
		futures <- f
	}
}

func (q *quicmqDur) replay(ctx context.Context, n int) (int, error) {
	s, err := q.conns[0].Subscribe(ctx, "replay.bench", client.SubscribeOptions{From: client.Earliest})
	if err != nil {
		return 0, err
	}
	defer s.Close()
	for i := range n {
		r, err := s.Next(ctx)
		if err != nil {
			return i, err
		}
		if r.Offset != uint64(i) {
			return i, fmt.Errorf("record %d has offset %d", i, r.Offset)
		}
	}
	return n, nil
}

func (q *quicmqDur) close() {
	for _, c := range q.conns {
		c.Close()
	}
}

type jsDur struct {
	conns []*nats.Conn
	js    []nats.JetStreamContext
}

func (j *jsDur) connect(ctx context.Context, n int) error {
	for i := range max(n, 1) {
		nc, err := nats.Connect("nats://" + natsAddr)
		if err != nil {
			return err
		}
		js, err := nc.JetStream(nats.PublishAsyncMaxPending(1024))
		if err != nil {
			return err
		}
		j.conns = append(j.conns, nc)
		j.js = append(j.js, js)
		if i == 0 {
			for _, name := range []string{"PUB", "REPLAY"} {
				if _, err := js.AddStream(&nats.StreamConfig{Name: name, Subjects: []string{strings.ToLower(name) + ".>"}, Storage: nats.FileStorage}); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (j *jsDur) publishN(ctx context.Context, i int, subject string, payload []byte, n int, stop <-chan struct{}, done func(error)) {
	futures := make(chan nats.PubAckFuture, 4096)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for f := range futures {
			select {
			case <-f.Ok():
				done(nil)
			case err := <-f.Err():
				done(err)
			case <-ctx.Done():
				done(ctx.Err())
			}
		}
	}()
	defer wg.Wait()
	defer close(futures)
	for k := 0; n < 0 || k < n; k++ {
		select {
		case <-stop:
			return
		default:
		}
		f, err := j.js[i].PublishAsync(subject, payload, nats.StallWait(time.Minute))
		if err != nil {
			done(err)
			return
		}
		futures <- f
	}
}

func (j *jsDur) publishUntil(ctx context.Context, i int, payload []byte, stop <-chan struct{}, done func(error)) {
	j.publishN(ctx, i, "pub.bench", payload, -1, stop, done)
}

func (j *jsDur) load(ctx context.Context, n int, payload []byte) error {
	var first error
	var once sync.Once
	j.publishN(ctx, 0, "replay.bench", payload, n, nil, func(err error) {
		if err != nil {
			once.Do(func() { first = err })
		}
	})
	return first
}

// replay reads the stream from its start with an ordered push consumer, nats.go's fastest
// way to read a stream in order.
func (j *jsDur) replay(ctx context.Context, n int) (int, error) {
	var got atomic.Int64
	var bad atomic.Int64
	done := make(chan struct{})
	var once sync.Once
	sub, err := j.js[0].Subscribe("replay.bench", func(m *nats.Msg) {
		k := got.Add(1)
		if md, err := m.Metadata(); err != nil || md.Sequence.Stream != uint64(k) {
			bad.Add(1)
		}
		if int(k) == n {
			once.Do(func() { close(done) })
		}
	}, nats.OrderedConsumer(), nats.DeliverAll())
	if err != nil {
		return 0, err
	}
	defer sub.Unsubscribe()
	sub.SetPendingLimits(-1, -1)
	select {
	case <-done:
	case <-ctx.Done():
	}
	if b := bad.Load(); b > 0 {
		return int(got.Load()), fmt.Errorf("%d records out of order", b)
	}
	return int(got.Load()), ctx.Err()
}

func (j *jsDur) close() {
	for _, nc := range j.conns {
		nc.Close()
	}
}

// runDurable is the parent of scenarios 3 ("publish") and 4 ("replay").
func runDurable(args []string, mode string) error {
	fs := flag.NewFlagSet(mode, flag.ExitOnError)
	systemsFlag := fs.String("systems", "quicmq,jetstream-sync,jetstream", "systems: quicmq, jetstream-sync (fsync before ack), jetstream (default: ack before fsync)")
	pubsFlag := fs.String("publishers", "1,16", "publish: publisher connections, comma-separated")
	size := fs.Int("size", 0, "payload bytes (default 1024 for publish, 100 for replay)")
	dur := fs.Duration("duration", 10*time.Second, "publish: measured window")
	records := fs.Int("records", 1000000, "replay: records stored and read back")
	repeat := fs.Int("repeat", 1, "repetitions")
	out := fs.String("out", defaultOut, "directory for the JSON results")
	rawPebble := fs.Bool("raw-pebble", true, "publish: after each quicmq run, in the same namespace, a raw Pebble writer in a process of its own (as many writers as publishers, synced batches of the node's measured records per commit, the log's keys, value sizes and Pebble options): its CPU per record beside the node process's (goal: node at most 2x); then a bare QUIC sink in a process of its own (the node's listener settings) taking the same records from as many connections: the transport's share, which bounds node/raw from below")
	fs.Parse(args)
	if err := lossy.Check(); err != nil {
		return fmt.Errorf("%w; this scenario runs each broker in a namespace of its own and is skipped", err)
	}
	if *size == 0 {
		*size = 1024
		if mode == "replay" {
			*size = 100
		}
	}
	pubs := []int{1}
	if mode == "publish" {
		pubs = nil
		for _, s := range strings.Split(*pubsFlag, ",") {
			v, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				return fmt.Errorf("--publishers %q: %w", s, err)
			}
			pubs = append(pubs, v)
		}
	}
	systems := strings.Split(*systemsFlag, ",")
	slot, stop := killOnSignal()
	defer stop()
	var results []*durResult
	started := time.Now()
	total := *repeat * len(pubs) * len(systems)
	for r := 1; r <= *repeat; r++ {
		for _, np := range pubs {
			for _, sys := range systems {
				p := durParams{Mode: mode, System: sys, Publishers: np, Size: *size, Duration: *dur, Records: *records, RawPebble: *rawPebble}
				fmt.Fprintf(os.Stderr, "[%d/%d %s] repeat %d: %s %s, %d publishers ...", len(results)+1, total,
					time.Since(started).Round(time.Second), r, mode, sys, np)
				var res durResult
				if err := workerIn(sys, 15*time.Minute, func(string) []string { return p.args() }, &res, slot); err != nil {
					fmt.Fprintf(os.Stderr, " failed: %v\n", err)
					continue
				}
				res.Repeat = r
				fmt.Fprintf(os.Stderr, " %.0f records/s, %.1f broker cpu-µs/record, %d errors %v\n", res.Rate, res.BrokerCPUus, res.Errors, res.Notes)
				if res.RawCPUus > 0 {
					fmt.Fprintf(os.Stderr, "    raw pebble, %.0f records/commit: %.0f records/s, %.1f cpu-µs/record\n", res.NodeRecordsPerCommit, res.RawRate, res.RawCPUus)
				}
				if res.SinkCPUus > 0 {
					fmt.Fprintf(os.Stderr, "    quic sink: %.0f records/s, %.1f cpu-µs/record\n", res.SinkRate, res.SinkCPUus)
				}
				results = append(results, &res)
			}
		}
	}
	path, err := saveResults(*out, mode, results)
	if err != nil {
		return err
	}
	if err := plotDurable(results, pubs, systems, mode, *size, *records, path); err != nil {
		return err
	}
	printDurable(results, pubs, systems, mode, *records)
	if mode == "publish" {
		printRawPebble(results, pubs)
	}
	return nil
}

// plotDurable draws the median records/s of each system and publisher count beside the
// results at path (same name, .png).
func plotDurable(results []*durResult, pubs []int, systems []string, mode string, size, records int, path string) error {
	var labels []string
	var values []float64
	for _, np := range pubs {
		for _, sys := range systems {
			var rates []float64
			for _, r := range results {
				if r.System == sys && r.Publishers == np {
					rates = append(rates, r.Rate)
				}
			}
			if len(rates) == 0 {
				continue
			}
			label := sys
			if mode == "publish" {
				label = fmt.Sprintf("%s x%d", sys, np)
			}
			labels = append(labels, label)
			values = append(values, median(rates).med)
		}
	}
	title := fmt.Sprintf("durable publish, %d B records (median records/s)", size)
	if mode == "replay" {
		title = fmt.Sprintf("replay of %d records of %d B from offset 0 (median records/s)", records, size)
	}
	return plotBars(title, "records/s", labels, values, path)
}

// printDurable prints the Markdown table of the results: medians per system and publisher
// count, and QuicMQ's rate over each system's in the same repeat.
func printDurable(results []*durResult, pubs []int, systems []string, mode string, records int) {
	if mode == "replay" {
		fmt.Println("| system | records read from offset 0 | records/s | broker cpu-µs/record | quicmq/this |")
		fmt.Println("|---|---|---|---|---|")
	} else {
		fmt.Println("| system | ack means | publishers | records/s | broker cpu-µs/record | quicmq/this |")
		fmt.Println("|---|---|---|---|---|---|")
	}
	for _, np := range pubs {
		for _, sys := range systems {
			var rates, cpus, ratios []float64
			for _, r := range results {
				if r.System != sys || r.Publishers != np {
					continue
				}
				rates = append(rates, r.Rate)
				cpus = append(cpus, r.BrokerCPUus)
				for _, q := range results {
					if q.System == "quicmq" && q.Publishers == np && q.Repeat == r.Repeat && r.Rate > 0 {
						ratios = append(ratios, q.Rate/r.Rate)
					}
				}
			}
			if len(rates) == 0 {
				continue
			}
			if mode == "replay" {
				fmt.Printf("| %s | %d | %v | %v | %v |\n", sys, records, median(rates), median(cpus), median(ratios))
				continue
			}
			fmt.Printf("| %s | %s | %d | %v | %v | %v |\n", sys, durableMeaning[sys], np, median(rates), median(cpus), median(ratios))
		}
	}
}
