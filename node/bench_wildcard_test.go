package node_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/clienthook"
	"github.com/quicmq/quicmq/internal/nodeproc"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/wal"
)

// Wildcard subscriptions over many topics (issue 35), each beside its baseline in the same
// run, on one data set: QUICMQ_BENCH_WILD_TOPICS (default 100,000) topics "scale.N" of one
// 100 B record each, and one topic "one.replay" of as many records.
//
//	go test -run '^$' -bench 'Wildcard' -benchtime 5x -count 1 ./node
//
// (5x, not fewer: the ratios are medians over runs of at least a quarter of the largest
// b.N, which then leaves out the framework's first run, of b.N 1, on a cold node.)
//
// BenchmarkWildcardReplay/wildcard reads every scale.N from earliest through "scale.>";
// /one-topic reads one.replay from earliest, and reports "wild/one": the wildcard's median
// records/s over this process's runs divided by its own. Both report "heap-MiB": the heap in
// use (after a GC) with the subscription open and every record read, less the heap before it
// was opened: node and client together (the client keeps its own per-topic state), so an
// upper bound of what the subscription costs the node.
//
// The raw/ leaves read the same pair with a bare wire reader (a wire.Decoder) of protocol
// version 3 that accepts batched frames: the wildcard's records come in RUNS frames.
//
// The process/ leaves read the same pair through the SDK from a `quicmq node` process on the
// same data, after one untimed replay of each (which prints what the first wildcard replay
// added to the node's resident memory): "node-rss-MiB" is what each leaf's subscription added
// to it (little, once the first replay took its memory), "node-cpu-µs/record" its CPU,
// beside this process's "cpu-µs/record".
// process/wildcard-v2 is the wildcard read by the SDK as a client of protocol version 2 (a
// TOPIC and a RECORD frame per topic, as before RUNS); process/one-topic reports its ratio
// to its own rate as "v2-wild/one", beside "wild/one" for the SDK of version 3.
//
// BenchmarkWildcardLive opens 10 subscriptions "scale.>" from latest (each on a connection of
// its own), then measures the heap they added ("heap-MiB", node and clients), the process's
// CPU while they wait ("idle-cpu-ms/s", over 2 s; "base-idle-cpu-ms/s" the same once they
// are closed), and, for 200 publishes of one record to a random scale.N one after the
// other, the time from the publish's call (which includes the fsync) to its arrival on each
// of the 10 ("p50-ms", "p99-ms"); "literal-p99-ms" is the same for 10 subscriptions of one
// literal topic, the baseline.

// wildSet writes the data set into a fresh data directory, through the node's log, and lets
// Pebble flush and compact it so both leaves read sstables.
func wildSet(b *testing.B) (dir string, topics int) {
	topics = envInt(b, "QUICMQ_BENCH_WILD_TOPICS", 100_000)
	dir = b.TempDir()
	n := startBenchNode(b, dir)
	payload := randomBytes(replaySize)
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Value
	window := make(chan struct{}, 256)
	done := func(res wal.AppendResult) {
		if res.Err != nil {
			failed.Store(res.Err)
		}
		<-window
		wg.Done()
	}
	one := make([]wal.Record, 512)
	for i := range one {
		one[i].Payload = payload
	}
	for off := 0; off < topics; off += len(one) {
		window <- struct{}{}
		wg.Add(1)
		n.Log().AppendAsync(wal.AppendRequest{Topic: "one.replay", Records: one[:min(len(one), topics-off)]}, done)
	}
	for i := range topics {
		window <- struct{}{}
		wg.Add(1)
		n.Log().AppendAsync(wal.AppendRequest{Topic: fmt.Sprintf("scale.%d", i), Records: []wal.Record{{Payload: payload}}}, done)
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
	n.stop()
	compactRecords(b, dir)
	fmt.Fprintf(os.Stderr, "wildcard set: %d topics of one record and one topic of %d, written and compacted in %v\n", topics, topics, time.Since(start).Round(time.Millisecond))
	return dir, topics
}

func BenchmarkWildcardReplay(b *testing.B) {
	dir, topics := wildSet(b)
	n := startBenchNode(b, dir)
	c := dialBench(b, n)
	// leaf measures one replay of pattern by read, which returns once every record arrived
	// and how to end the subscription; key names its rate for the ratio to the one-topic
	// leaf (base + "one"), reported there.
	leaf := func(name, pattern, base, key string, read func(pattern string) (end func(), err error)) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(topics) * replaySize)
			var elapsed time.Duration
			var heap float64
			cpu := processCPU(b)
			for range b.N {
				b.StopTimer()
				before := heapInUse()
				b.StartTimer()
				start := time.Now()
				end, err := read(pattern)
				elapsed += time.Since(start)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				heap = max(heap, float64(int64(heapInUse())-int64(before))/(1<<20))
				end()
				b.StartTimer()
			}
			rate := float64(topics) * float64(b.N) / elapsed.Seconds()
			b.StopTimer()
			b.ReportMetric(rate, "records/s")
			b.ReportMetric(heap, "heap-MiB")
			reportCPU(b, cpu, float64(topics)*float64(b.N), "record")
			medians.add(base+key, b.N, rate)
			if key == "one" {
				if w, ok := medians.median(base + "wildcard"); ok {
					b.ReportMetric(w/rate, "wild/one")
				}
			}
		})
	}
	sdk := func(pattern string) (func(), error) {
		sub, err := readN(c, pattern, topics)
		if err != nil {
			return nil, err
		}
		return func() { sub.Close() }, nil
	}
	leaf("wildcard", "scale.>", "wild/", "wildcard", sdk)
	leaf("one-topic", "one.replay", "wild/", "one", sdk)
	// The same pair read by a bare wire reader (frames decoded and counted, offsets checked
	// per topic index in a slice), so that what the SDK does per topic (its portable position
	// keeps a map per topic) does not hide the node's share: its heap-MiB is the node's.
	raw := func(pattern string) (func(), error) { return readRaw(n, pattern, topics, wire.Version) }
	leaf("raw/wildcard", "scale.>", "wild/raw/", "wildcard", raw)
	leaf("raw/one-topic", "one.replay", "wild/raw/", "one", raw)

	// The same pair read through the SDK from a `quicmq node` process on the same data (this
	// process's node lets go of it first): what a client in a process of its own sees, whose
	// collections do not mark the node's heap and the other way round (in this process's
	// leaves above, a trace put 38% of the running time in the GC's mark workers). Reports
	// "node-rss-MiB": the node process's resident memory added by the subscription (all of
	// the node's cost, read from /proc), and "node-cpu-µs/record" beside this process's.
	caFile := n.CAFile()
	c.Close()
	n.stop()
	p := startNodeProcess(b, dir)
	pc, err := client.Dial(context.Background(), client.Options{CAFile: caFile, Name: "bench"}, p.Addr)
	if err != nil {
		b.Fatal(err)
	}
	defer pc.Close()
	// The SDK as a client of protocol version 2 (TOPIC and RECORD frames per topic of a
	// wildcard, no RUNS): the wildcard before version 3, beside it in the same run.
	v2opts := clienthook.OfferVersion(client.Options{CAFile: caFile, Name: "bench-v2"}, 2).(client.Options)
	pc2, err := client.Dial(context.Background(), v2opts, p.Addr)
	if err != nil {
		b.Fatal(err)
	}
	defer pc2.Close()
	procLeaf := func(name, pattern, key string, pc *client.Conn) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(topics) * replaySize)
			var elapsed time.Duration
			var rss float64
			cpu, nodeCPU := processCPU(b), processNodeCPU(b, p)
			for range b.N {
				b.StopTimer()
				before := processRSS(b, p)
				b.StartTimer()
				start := time.Now()
				sub, err := readN(pc, pattern, topics)
				elapsed += time.Since(start)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				rss = max(rss, float64(int64(processRSS(b, p))-int64(before))/(1<<20))
				sub.Close()
				b.StartTimer()
			}
			rate := float64(topics) * float64(b.N) / elapsed.Seconds()
			b.StopTimer()
			b.ReportMetric(rate, "records/s")
			b.ReportMetric(rss, "node-rss-MiB")
			b.ReportMetric(float64((processNodeCPU(b, p)-nodeCPU).Microseconds())/(float64(topics)*float64(b.N)), "node-cpu-µs/record")
			reportCPU(b, cpu, float64(topics)*float64(b.N), "record")
			medians.add("wild/process/"+key, b.N, rate)
			if key == "one" {
				if w, ok := medians.median("wild/process/wildcard"); ok {
					b.ReportMetric(w/rate, "wild/one")
				}
				if w, ok := medians.median("wild/process/wildcard-v2"); ok {
					b.ReportMetric(w/rate, "v2-wild/one")
				}
			}
		})
	}
	// A first replay of each, untimed: the fresh process fills its block cache and takes its
	// memory (a later replay reuses it), which would otherwise fall on whichever leaf comes
	// first. What that first wildcard replay added to the node's resident memory is the
	// memory figure of a subscription.
	before := processRSS(b, p)
	for _, pattern := range []string{"scale.>", "one.replay"} {
		sub, err := readN(pc, pattern, topics)
		if err != nil {
			b.Fatal(err)
		}
		if pattern == "scale.>" {
			fmt.Fprintf(os.Stderr, "first wildcard replay of the node process: node RSS +%.1f MiB\n", float64(int64(processRSS(b, p))-int64(before))/(1<<20))
		}
		sub.Close()
	}
	procLeaf("process/wildcard", "scale.>", "wildcard", pc)
	procLeaf("process/wildcard-v2", "scale.>", "wildcard-v2", pc2)
	procLeaf("process/one-topic", "one.replay", "one", pc)
}

// startNodeProcess builds quicmq and runs `quicmq node` on dir (its TLS material included)
// until b ends (internal/nodeproc), for benchmarks that keep the node out of their own process.
func startNodeProcess(b *testing.B, dir string) *nodeproc.Process {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "quicmq")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/quicmq/quicmq/cmd/quicmq").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	return nodeproc.Start(b, bin, "bench", "--anonymous", "--data", dir, "--listen", "127.0.0.1:0", "--name", "bench", "--region", "bench")
}

// processRSS is p's resident memory in bytes.
func processRSS(b *testing.B, p *nodeproc.Process) uint64 {
	b.Helper()
	rss, err := p.RSS()
	if err != nil {
		b.Fatal(err)
	}
	return rss
}

// processNodeCPU is p's CPU time so far.
func processNodeCPU(b *testing.B, p *nodeproc.Process) time.Duration {
	b.Helper()
	d, err := p.CPU()
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// readRaw subscribes to pattern from earliest over a connection of its own, speaking the
// wire protocol itself in version (batched frames accepted: RECORDS, and in version 3 RUNS),
// and reads count records, each topic's offsets dense from 0. end ends the subscription and
// the connection.
func readRaw(n *benchNode, pattern string, count int, version uint64) (end func(), err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pem, err := os.ReadFile(n.CAFile())
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	conn, err := quic.DialAddr(ctx, n.Addr().String(),
		&tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: []string{wire.ALPN}, MinVersion: tls.VersionTLS13},
		&quic.Config{MaxStreamReceiveWindow: 16 << 20, MaxConnectionReceiveWindow: 64 << 20})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			conn.CloseWithError(0, "")
		}
	}()
	ctl, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := ctl.Write(wire.Append(nil, &wire.Hello{Version: version, Client: "raw"})); err != nil {
		return nil, err
	}
	if _, err := wire.NewReader(ctl, wire.Limits{}).Read(); err != nil {
		return nil, err
	}
	str, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := str.Write(wire.Append(nil, &wire.Subscribe{Pattern: pattern, Start: wire.StartEarliest, Flags: wire.SubscribeRecords})); err != nil {
		return nil, err
	}
	// A wire.Decoder over a buffer of its own, as the SDK reads: RECORDS and RUNS frames
	// come back one record at a time, with no allocation per frame.
	d := wire.NewDecoder(wire.Limits{MaxFrame: 8 << 20, MaxPayload: 8 << 20})
	buf := make([]byte, 0, 256<<10)
	var next []uint64 // by topic index
	take := func(f *wire.Record) error {
		if f.Bind != "" {
			next = append(next, 0)
		}
		if f.Index >= uint64(len(next)) || f.Offset != next[f.Index] || len(f.Payload) != replaySize {
			return fmt.Errorf("topic index %d: got offset %d", f.Index, f.Offset)
		}
		next[f.Index]++
		return nil
	}
	for got, r := 0, 0; got < count; {
		f, used, err := d.Decode(buf[r:])
		if errors.Is(err, io.ErrUnexpectedEOF) {
			// Keep the partial frame, read more behind it.
			buf = append(buf[:0], buf[r:]...)
			r = 0
			if cap(buf)-len(buf) < 64<<10 {
				buf = slices.Grow(buf, 64<<10)
			}
			k, err := str.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+k]
			if err != nil && k == 0 {
				return nil, fmt.Errorf("after %d records: %w", got, err)
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("after %d records: %w", got, err)
		}
		r += used
		switch f := f.(type) {
		case *wire.Topic:
			next = append(next, 0)
		case *wire.Record:
			if err := take(f); err != nil {
				return nil, err
			}
			got++
		case *wire.Subscribed:
		default:
			return nil, fmt.Errorf("unexpected %s", f.Type())
		}
	}
	return func() {
		str.CancelRead(0)
		str.Close()
		conn.CloseWithError(0, "")
	}, nil
}

// readN subscribes to pattern from earliest and reads count records, each topic's offsets
// dense from 0; it returns the subscription, still open.
func readN(c *client.Conn, pattern string, count int) (*client.Subscription, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sub, err := c.Subscribe(ctx, pattern, client.SubscribeOptions{From: client.Earliest})
	if err != nil {
		return nil, err
	}
	// Each topic's next offset by its number (scale.N: N; one.replay: the last slot), not in
	// a map by name: a map of 100,000 names cost this reader about 0.45 µs a record, a
	// sixth of the wildcard leaf's CPU, that the one-topic leaf, with one name, did not pay.
	next := make([]uint64, count+1)
	slot := func(topic string) int {
		if rest, ok := strings.CutPrefix(topic, "scale."); ok {
			if n, err := strconv.Atoi(rest); err == nil && n >= 0 && n < count {
				return n
			}
		}
		return count // one.replay: not parsed, as a failed Atoi allocates its error
	}
	for i := range count {
		rec, err := sub.Next(ctx)
		if err != nil {
			sub.Close()
			return nil, fmt.Errorf("record %d: %w", i, err)
		}
		k := slot(rec.Topic)
		if rec.Offset != next[k] || len(rec.Payload) != replaySize {
			sub.Close()
			return nil, fmt.Errorf("%s: got offset %d, want %d", rec.Topic, rec.Offset, next[k])
		}
		next[k] = rec.Offset + 1
	}
	return sub, nil
}

func BenchmarkWildcardLive(b *testing.B) {
	dir, topics := wildSet(b)
	n := startBenchNode(b, dir)
	pub := dialBench(b, n)
	const subs = 10
	ctx := context.Background()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		// The baselines: 10 subscriptions of one literal topic, each on a connection of its
		// own, fed by the same publishes; and the process idle once the wildcards are closed.
		var lits []*client.Subscription
		for range subs {
			sub, err := dialBench(b, n).Subscribe(ctx, "live.one", client.SubscribeOptions{From: client.Latest})
			if err != nil {
				b.Fatal(err)
			}
			lits = append(lits, sub)
		}
		rnd := testlog.Rand(b, "topics")
		lit := publishToAll(b, pub, lits, func() string { return "live.one" })
		for _, s := range lits {
			s.Close()
		}

		before := heapInUse()
		var ss []*client.Subscription
		for range subs {
			sub, err := dialBench(b, n).Subscribe(ctx, "scale.>", client.SubscribeOptions{From: client.Latest})
			if err != nil {
				b.Fatal(err)
			}
			ss = append(ss, sub)
		}
		// A fence: a record published now reaches each of them, so every set-up is done.
		publishToAll(b, pub, ss, func() string { return "scale.0" })
		heap := float64(int64(heapInUse())-int64(before)) / (1 << 20)
		idle := idleCPU(b)
		wild := publishToAll(b, pub, ss, func() string { return fmt.Sprintf("scale.%d", rnd.IntN(topics)) })
		b.ReportMetric(heap, "heap-MiB")
		b.ReportMetric(idle, "idle-cpu-ms/s")
		b.ReportMetric(ms(wild[len(wild)/2]), "p50-ms")
		b.ReportMetric(ms(wild[len(wild)*99/100]), "p99-ms")
		b.ReportMetric(ms(lit[len(lit)*99/100]), "literal-p99-ms")
		for _, s := range ss {
			s.Close()
		}
		b.ReportMetric(idleCPU(b), "base-idle-cpu-ms/s")
		b.StartTimer()
	}
}

// idleCPU is the CPU time the process spends per second of wall time over 2 s, in ms.
func idleCPU(b *testing.B) float64 {
	cpu := processCPU(b)
	t0 := time.Now()
	testlog.Pause(context.Background(), 2*time.Second) // the measurement is of idle time itself
	return float64((processCPU(b) - cpu).Microseconds()) / 1000 / time.Since(t0).Seconds()
}

// publishToAll publishes 200 records one after the other, each to the topic next names
// (the first one a fence, not counted), and returns the sorted times from each publish's
// call to its arrival on each of subs.
func publishToAll(b *testing.B, pub *client.Conn, subs []*client.Subscription, next func() string) []time.Duration {
	ctx := context.Background()
	var lat []time.Duration
	got := make(chan time.Duration, len(subs))
	for i := range 201 {
		topic := next()
		start := time.Now()
		for _, s := range subs {
			go func() {
				ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				rec, err := s.Next(ctx)
				if err != nil || rec.Topic != topic {
					got <- -1
					return
				}
				got <- time.Since(start)
			}()
		}
		if _, err := pub.Publish(ctx, client.Message{Topic: topic, Payload: []byte("x")}); err != nil {
			b.Fatal(err)
		}
		for range subs {
			d := <-got
			if d < 0 {
				b.Fatal("a subscription did not get the record")
			}
			if i > 0 {
				lat = append(lat, d)
			}
		}
	}
	slices.Sort(lat)
	return lat
}
