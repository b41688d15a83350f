package node_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	dto "github.com/prometheus/client_model/go"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/node"
	"github.com/quicmq/quicmq/node/nodetest"
	"github.com/quicmq/quicmq/wal"
)

// Benchmarks of the durable broker core, each beside its baseline in the same run. The
// figures and how to read them are in docs/benchmarks.md; run them as it says:
//
//	go test -run '^$' -bench 'Publish' -benchtime 5s -count 3 ./node
//	go test -run '^$' -bench 'Replay' -count 3 ./node
//	go test -run '^$' -bench 'Subscribe' -benchtime 3s -count 3 ./node
//
// A baseline leaf runs after the leaves it is compared with (source order), and reports
// "node/raw" (or "quic/tls"): its partner's median records/s over this process's runs,
// divided by its own. Every leaf also reports the CPU time the whole test process (node,
// client, Pebble's background work, GC) spent per unit of work ("cpu-µs/record"), which the
// other load of a shared machine disturbs much less than the wall-clock rates.
//
// Environment: QUICMQ_BENCH_REPLAY_RECORDS (default 1000000) sizes the replay data set;
// QUICMQ_BENCH_RAW_BATCH fixes the raw baseline's records per commit.

const (
	publishSize = 1024 // payload bytes of a published record
	replaySize  = 100  // payload bytes of a replayed record
	// walValueOverhead is what the log stores beside a payload without headers or producer
	// id (CRC, version, flags, time, byte position): raw baselines write values this much
	// longer than the payload, so both sides store the same bytes.
	walValueOverhead = 22
)

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func randomBytes(n int) []byte {
	p := make([]byte, n)
	r := mrand.New(mrand.NewPCG(1, 2))
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

// benchNode is a node running in this process, with its data in dir.
type benchNode struct {
	*node.Node
	stop func() // stops the node and waits for Run; safe to call twice
}

func startBenchNode(b *testing.B, dir string, mod ...func(*node.Config)) *benchNode {
	b.Helper()
	cfg := node.Config{
		DataDir: dir, Listen: "127.0.0.1:0", Name: "bench", Region: "bench",
		Logger: slog.New(slog.DiscardHandler),
	}
	for _, m := range mod {
		m(&cfg)
	}
	n, err := node.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	var once sync.Once
	bn := &benchNode{Node: n}
	bn.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					b.Errorf("node Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				b.Errorf("node did not stop within 30 s")
			}
		})
	}
	b.Cleanup(bn.stop)
	return bn
}

// dialBench connects a client; the connection is closed by b.Cleanup (Close is idempotent).
func dialBench(b *testing.B, n *benchNode) *client.Conn {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{CAFile: n.CAFile(), Name: "bench"}, n.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// rawPebble opens a Pebble store with the options the node's log uses (wal.Open).
func rawPebble(b *testing.B, dir string) *pebble.DB {
	b.Helper()
	db, err := pebble.Open(dir, &pebble.Options{
		FormatMajorVersion: pebble.FormatNewest,
		MemTableSize:       wal.DefaultMemTableSize,
		CacheSize:          wal.DefaultCacheSize,
		Logger:             quietPebble{},
	})
	if err != nil {
		b.Fatal(err)
	}
	return db
}

type quietPebble struct{}

func (quietPebble) Infof(string, ...any)           {}
func (quietPebble) Errorf(string, ...any)          {}
func (quietPebble) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }

func fsyncCount(db *pebble.DB) uint64 {
	var m dto.Metric
	if h := db.Metrics().LogWriter.FsyncLatency; h != nil && h.Write(&m) == nil {
		return m.GetHistogram().GetSampleCount()
	}
	return 0
}

// processCPU is the CPU time (user and system) this process used so far. Divided by the
// work done it gives a cost that depends much less than wall-clock rates on what else the
// (shared) machine runs at the same time.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process's CPU time since start per unit of work.
func reportCPU(b *testing.B, start time.Duration, units float64, unit string) {
	b.ReportMetric(float64((processCPU(b)-start).Microseconds())/units, "cpu-µs/"+unit)
}

// recordKey is the log's key of a record: 'm' | topic id (uint32 BE) | offset (uint64 BE).
func recordKey(id uint32, off uint64) []byte {
	k := make([]byte, 13)
	k[0] = 'm'
	k[1], k[2], k[3], k[4] = byte(id>>24), byte(id>>16), byte(id>>8), byte(id)
	for i := range 8 {
		k[5+i] = byte(off >> (56 - 8*i))
	}
	return k
}

// runMedians collects a figure of each run of a leaf in this process, so that a baseline
// leaf running after it can compare itself with the median.
type runMedians struct {
	mu   sync.Mutex
	runs map[string][]medianRun
}

type medianRun struct {
	n int // b.N of the run
	v float64
}

var medians = runMedians{runs: map[string][]medianRun{}}

func (m *runMedians) add(key string, n int, v float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.runs[key] = append(m.runs[key], medianRun{n, v})
}

// median is the median of key's figures over the runs with at least a quarter of the largest
// b.N: the framework's ramp-up runs (b.N 1, 100, ...) are too short to say anything about
// throughput. ok is false when the partner leaf did not run.
func (m *runMedians) median(key string) (float64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	maxN := 0
	for _, r := range m.runs[key] {
		maxN = max(maxN, r.n)
	}
	var v []float64
	for _, r := range m.runs[key] {
		if r.n*4 >= maxN {
			v = append(v, r.v)
		}
	}
	if len(v) == 0 {
		return 0, false
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2], true
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2, true
}

// BenchmarkPublish: durable publishes of 1 KiB records through a node on loopback, with
// client.PublishAsync pipelining (the SDK's default window of 1024 unanswered publishes per
// connection), from one connection and from 16; then the raw Pebble baseline: 16 writers,
// each committing synced batches (batch.Commit(pebble.Sync)) of as many records as the node
// put in each of its commits in the clients=16 runs (median), with the same keys and value
// sizes the log stores, to a fresh store with the log's Pebble options; last the transport
// alone (benchQUICFloor), which bounds what the node could reach.
func BenchmarkPublish(b *testing.B) {
	payload := randomBytes(publishSize)
	b.Run("node/clients=1", func(b *testing.B) { benchNodePublish(b, 1, payload) })
	b.Run("node/clients=16", func(b *testing.B) { benchNodePublish(b, 16, payload) })
	b.Run("raw-pebble/writers=16", func(b *testing.B) { benchRawPublish(b, 16, payload) })
	b.Run("quic-only/conns=16", func(b *testing.B) { benchQUICFloor(b, 16, payload) })
}

func benchNodePublish(b *testing.B, clients int, payload []byte) {
	n := startBenchNode(b, b.TempDir())
	conns := make([]*client.Conn, clients)
	for i := range conns {
		conns[i] = dialBench(b, n)
	}
	const topic = "bench.publish"
	// Create the topic first, so that the timed part is the steady state of one topic.
	if _, err := conns[0].Publish(context.Background(), client.Message{Topic: topic, Payload: payload}); err != nil {
		b.Fatal(err)
	}
	before := n.Log().Stats()
	b.SetBytes(publishSize)
	b.ResetTimer()
	cpu := processCPU(b)
	start := time.Now()
	runShares(b, clients, func(i, share int) error {
		return nodetest.PublishPipelined(context.Background(), conns[i], topic, payload, share)
	})
	elapsed := time.Since(start)
	after := n.Log().Stats()
	recs := float64(after.Records - before.Records)
	if int(recs) != b.N {
		b.Fatalf("the log appended %v records, want %d", recs, b.N)
	}
	rate := float64(b.N) / elapsed.Seconds()
	b.ReportMetric(rate, "records/s")
	perCommit := recs / float64(max(after.Commits-before.Commits, 1))
	b.ReportMetric(perCommit, "records/commit")
	b.ReportMetric(recs/float64(max(after.Fsyncs-before.Fsyncs, 1)), "records/fsync")
	reportCPU(b, cpu, recs, "record")
	key := fmt.Sprintf("publish/%d", clients)
	medians.add(key+"/rate", b.N, rate)
	medians.add(key+"/perCommit", b.N, perCommit)
}

func benchRawPublish(b *testing.B, writers int, payload []byte) {
	batch := 0
	if v, ok := medians.median(fmt.Sprintf("publish/%d/perCommit", writers)); ok {
		batch = max(int(v+0.5), 1)
	}
	if os.Getenv("QUICMQ_BENCH_RAW_BATCH") != "" || batch == 0 {
		batch = envInt(b, "QUICMQ_BENCH_RAW_BATCH", 64)
	}
	db := rawPebble(b, b.TempDir())
	defer db.Close()
	value := make([]byte, walValueOverhead+len(payload))
	copy(value[walValueOverhead:], payload)
	fsyncs := fsyncCount(db)
	var next atomic.Int64 // the next offset to claim, a batch at a time
	var wg sync.WaitGroup
	var failed atomic.Value
	b.SetBytes(publishSize)
	b.ResetTimer()
	cpu := processCPU(b)
	start := time.Now()
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				first := next.Add(int64(batch)) - int64(batch)
				if first >= int64(b.N) {
					return
				}
				bt := db.NewBatch()
				for off := first; off < min(first+int64(batch), int64(b.N)); off++ {
					_ = bt.Set(recordKey(0, uint64(off)), value, nil)
				}
				err := bt.Commit(pebble.Sync)
				_ = bt.Close()
				if err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
	rate := float64(b.N) / elapsed.Seconds()
	b.ReportMetric(rate, "records/s")
	b.ReportMetric(float64(batch), "records/commit")
	b.ReportMetric(float64(b.N)/float64(max(fsyncCount(db)-fsyncs, 1)), "records/fsync")
	rawCPU := float64((processCPU(b) - cpu).Microseconds()) / float64(b.N)
	b.ReportMetric(rawCPU, "cpu-µs/record")
	medians.add(fmt.Sprintf("publish/raw/%d/rate", writers), b.N, rate)
	medians.add(fmt.Sprintf("publish/raw/%d/cpu", writers), b.N, rawCPU)
	if nodeRate, ok := medians.median(fmt.Sprintf("publish/%d/rate", writers)); ok {
		b.ReportMetric(nodeRate/rate, "node/raw")
	}
}

// runShares splits b.N into shares for workers goroutines, runs fn(i, share) on each and
// waits for them all; then it stops the timer, and fails the benchmark if any fn failed.
func runShares(b *testing.B, workers int, fn func(i, share int) error) {
	var wg sync.WaitGroup
	var failed atomic.Value
	for i := range workers {
		share := b.N / workers
		if i < b.N%workers {
			share++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(i, share); err != nil {
				failed.Store(err)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
}

// replaySet is the data set of BenchmarkReplay: a node's data directory holding one topic of
// QUICMQ_BENCH_REPLAY_RECORDS records of 100 B, written by the node's own log, flushed and
// compacted by Pebble so that every leaf reads the same sstables.
func replaySet(b *testing.B) (dir string, count int) {
	count = envInt(b, "QUICMQ_BENCH_REPLAY_RECORDS", 1_000_000)
	dir = b.TempDir()
	n := startBenchNode(b, dir)
	// Written through the node's log (the same encoding a publish gets), in batches of 512
	// records, because only the reading is measured.
	payload := randomBytes(replaySize)
	recs := make([]wal.Record, 512)
	for i := range recs {
		recs[i].Payload = payload
	}
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Value
	window := make(chan struct{}, 8)
	for off := 0; off < count; off += len(recs) {
		window <- struct{}{}
		wg.Add(1)
		n.Log().AppendAsync(wal.AppendRequest{Topic: "bench.replay", Records: recs[:min(len(recs), count-off)]}, func(res wal.AppendResult) {
			if res.Err != nil {
				failed.Store(res.Err)
			}
			<-window
			wg.Done()
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
	n.stop()
	compactRecords(b, dir)
	// Printed, not logged: a parent benchmark's log is not shown.
	fmt.Fprintf(os.Stderr, "replay set: %d records of %d B written and compacted in %v\n", count, replaySize, time.Since(start).Round(time.Millisecond))
	return dir, count
}

// compactRecords flushes and compacts the record keys of the (closed) node's log in dir, so a
// replay reads what a long-running node would: records in sorted tables, not the memtable.
func compactRecords(b *testing.B, dir string) {
	b.Helper()
	db := rawPebble(b, filepath.Join(dir, "log"))
	if err := db.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := db.Compact(context.Background(), []byte{'m'}, []byte{'n'}, true); err != nil {
		b.Fatal(err)
	}
	if err := db.Close(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkReplay: a subscription from offset 0 (client.Subscribe with Earliest) reading the
// whole data set through a node on loopback; "wal/scan", the node's log read alone, for the
// reading; then the baseline, a raw Pebble scan of the same store's record keys copying each
// value out (into shared chunks, as any reader that keeps a record past Next must). One op is
// one full replay.
func BenchmarkReplay(b *testing.B) {
	dir, count := replaySet(b)
	b.Run("node/subscribe", func(b *testing.B) {
		n := startBenchNode(b, dir)
		defer n.stop()
		c := dialBench(b, n)
		defer c.Close()
		b.SetBytes(int64(count) * replaySize)
		b.ResetTimer()
		cpu := processCPU(b)
		start := time.Now()
		for range b.N {
			if err := replayAll(c, count); err != nil {
				b.Fatal(err)
			}
		}
		rate := float64(count) * float64(b.N) / time.Since(start).Seconds()
		b.StopTimer()
		b.ReportMetric(rate, "records/s")
		reportCPU(b, cpu, float64(count)*float64(b.N), "record")
		medians.add("replay", b.N, rate)
	})
	// Not a partner of the ratio: the node's log read alone (a wal.Scanner in batches of the
	// node's read-ahead, as a subscription reads it, records decoded and checked), to tell the
	// log's share of node/subscribe from QUIC's and the client's.
	b.Run("wal/scan", func(b *testing.B) {
		l, err := wal.Open(filepath.Join(dir, "log"), wal.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		b.SetBytes(int64(count) * replaySize)
		b.ResetTimer()
		cpu := processCPU(b)
		start := time.Now()
		for range b.N {
			if err := walScanAll(l, count); err != nil {
				b.Fatal(err)
			}
		}
		rate := float64(count) * float64(b.N) / time.Since(start).Seconds()
		b.StopTimer()
		b.ReportMetric(rate, "records/s")
		reportCPU(b, cpu, float64(count)*float64(b.N), "record")
	})
	b.Run("raw-pebble/scan", func(b *testing.B) {
		db := rawPebble(b, filepath.Join(dir, "log"))
		defer db.Close()
		b.SetBytes(int64(count) * replaySize)
		b.ResetTimer()
		cpu := processCPU(b)
		start := time.Now()
		for range b.N {
			if err := scanAll(db, count); err != nil {
				b.Fatal(err)
			}
		}
		rate := float64(count) * float64(b.N) / time.Since(start).Seconds()
		b.StopTimer()
		b.ReportMetric(rate, "records/s")
		rawCPU := float64((processCPU(b) - cpu).Microseconds()) / (float64(count) * float64(b.N))
		b.ReportMetric(rawCPU, "cpu-µs/record")
		medians.add("replay/raw", b.N, rate)
		medians.add("replay/raw/cpu", b.N, rawCPU)
		if nodeRate, ok := medians.median("replay"); ok {
			b.ReportMetric(nodeRate/rate, "node/raw")
		}
	})
	// Not a partner of the ratio either: the transport alone, which bounds node/subscribe.
	b.Run("quic-only/stream", func(b *testing.B) { benchQUICReplayFloor(b, count, replaySize) })
}

// replayAll reads count records from offset 0 and checks that they come dense and in order.
func replayAll(c *client.Conn, count int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sub, err := c.Subscribe(ctx, "bench.replay", client.SubscribeOptions{From: client.Earliest})
	if err != nil {
		return err
	}
	defer sub.Close()
	for off := range uint64(count) {
		rec, err := sub.Next(ctx)
		if err != nil {
			return fmt.Errorf("offset %d: %w", off, err)
		}
		if rec.Offset != off || len(rec.Payload) != replaySize {
			return fmt.Errorf("got offset %d (%d B), want %d (%d B)", rec.Offset, len(rec.Payload), off, replaySize)
		}
	}
	return nil
}

// walScanAll reads the replay set's topic through one wal.Scanner in batches of the node's
// default read-ahead (256 KiB) and at most 4,096 records, as a subscription does.
func walScanAll(l *wal.Log, count int) error {
	sc := l.NewScanner("bench.replay")
	defer sc.Release()
	next := uint64(0)
	for next < uint64(count) {
		n, err := sc.ReadFunc(next, 4096, 256<<10, func(r *wal.Record) error {
			if r.Offset != next || len(r.Payload) != replaySize {
				return fmt.Errorf("got offset %d (%d B), want %d", r.Offset, len(r.Payload), next)
			}
			next++
			return nil
		})
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("read stopped at %d of %d records", next, count)
		}
	}
	return nil
}

func scanAll(db *pebble.DB, count int) error {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{'m'}, UpperBound: []byte{'n'}})
	if err != nil {
		return err
	}
	var chunk []byte
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return errors.Join(err, it.Close())
		}
		if cap(chunk)-len(chunk) < len(v) {
			chunk = make([]byte, 0, max(256<<10, len(v)))
		}
		chunk = append(chunk, v...)
		n++
	}
	if err := it.Close(); err != nil {
		return err
	}
	if n != count {
		return fmt.Errorf("scanned %d records, want %d", n, count)
	}
	return nil
}

// BenchmarkSubscribe: new subscriptions on one open connection, each set up (Subscribe
// waits for the node's SUBSCRIBED; from the latest offset of an existing topic) and closed
// again (Close waits for the node's end of the stream): the churn of a service that
// subscribes per request or per tenant over a long-lived connection, which never runs into
// the per-connection limit. "sequential" does one subscription after the other (the latency
// of a subscription's life); "parallel-16" runs 16 goroutines on the same connection (what
// the node and the connection can take). Then the baseline a TCP-per-subscription design
// pays, in the same two modes: a new TLS 1.3 connection over TCP per subscription (full
// handshake, ECDSA P-256 server certificate verified by the client, no session resumption),
// with one request byte and one response byte.
func BenchmarkSubscribe(b *testing.B) {
	for _, par := range []int{1, 16} {
		b.Run("quic/"+modeName(par), func(b *testing.B) {
			n := startBenchNode(b, b.TempDir())
			c := dialBench(b, n)
			ctx := context.Background()
			if _, err := c.Publish(ctx, client.Message{Topic: "bench.subs", Payload: []byte("x")}); err != nil {
				b.Fatal(err)
			}
			rate := runParallel(b, par, func() error {
				sub, err := c.Subscribe(ctx, "bench.subs", client.SubscribeOptions{From: client.Latest})
				if err != nil {
					return err
				}
				return sub.Close()
			})
			b.ReportMetric(rate, "subs/s")
			medians.add("subscribe/"+modeName(par), b.N, rate)
		})
	}
	for _, par := range []int{1, 16} {
		b.Run("tls-tcp/"+modeName(par), func(b *testing.B) {
			addr, roots := startTLSEcho(b)
			conf := &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS13}
			rate := runParallel(b, par, func() error { return tlsRoundTrip(addr, conf) })
			b.ReportMetric(rate, "subs/s")
			if quicRate, ok := medians.median("subscribe/" + modeName(par)); ok {
				b.ReportMetric(quicRate/rate, "quic/tls")
			}
		})
	}
}

func modeName(par int) string {
	if par == 1 {
		return "sequential"
	}
	return fmt.Sprintf("parallel-%d", par)
}

// runParallel runs op b.N times on par goroutines, reports the CPU time per op and returns
// the rate in ops per second.
func runParallel(b *testing.B, par int, op func() error) float64 {
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	b.ResetTimer()
	cpu := processCPU(b)
	start := time.Now()
	for range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if err := op(); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
	reportCPU(b, cpu, float64(b.N), "op")
	return float64(b.N) / elapsed.Seconds()
}

func tlsRoundTrip(addr string, conf *tls.Config) error {
	conn, err := tls.Dial("tcp", addr, conf)
	if err != nil {
		return err
	}
	defer conn.Close()
	var buf [1]byte
	if _, err := conn.Write([]byte{1}); err != nil {
		return err
	}
	if _, err := io.ReadFull(conn, buf[:]); err != nil {
		return err
	}
	return nil
}

// startTLSEcho serves TLS 1.3 over TCP on loopback with a fresh self-signed ECDSA P-256
// certificate: each connection reads one byte and answers one byte. The listener and its
// connections end with the benchmark.
func startTLSEcho(b *testing.B) (string, *x509.CertPool) {
	b.Helper()
	cert, roots := selfSigned(b)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS13,
	})
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return // closed by Cleanup
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(10 * time.Second))
				var buf [1]byte
				if _, err := io.ReadFull(conn, buf[:]); err == nil {
					conn.Write(buf[:])
				}
			}()
		}
	}()
	b.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().String(), roots
}

// selfSigned makes a fresh self-signed ECDSA P-256 certificate for localhost and 127.0.0.1,
// and a pool that trusts it.
func selfSigned(b *testing.B) (tls.Certificate, *x509.CertPool) {
	b.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		b.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		b.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, roots
}
