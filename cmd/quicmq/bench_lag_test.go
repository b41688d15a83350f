package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/nodeproc"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/node/nodetest"
)

// BenchmarkLaggingSubscriberMemory checks invariant I5 on a real `quicmq node` process: a
// subscriber that reads a few records and then stops reading (its stream stays open) while
// QUICMQ_BENCH_LAG_RECORDS records (default 1000000, 256 B each) are published must add
// less than 64 MiB to the node's resident memory. The baseline leaf does the same without
// the stalled subscriber, in the same run; the stalled leaf reports its growth minus the
// median baseline growth of this process as "stalled-cost-MiB". One op is one whole run:
//
//	go test -run '^$' -bench LaggingSubscriberMemory -benchtime 1x -count 3 ./cmd/quicmq
func BenchmarkLaggingSubscriberMemory(b *testing.B) {
	bin := lagBinary(b)
	b.Run("baseline", func(b *testing.B) {
		for range b.N {
			growth := lagRun(b, bin, false)
			lagGrowth.mu.Lock()
			lagGrowth.baseline = append(lagGrowth.baseline, growth)
			lagGrowth.mu.Unlock()
		}
	})
	b.Run("stalled", func(b *testing.B) {
		for range b.N {
			growth := lagRun(b, bin, true)
			lagGrowth.mu.Lock()
			base := slices.Clone(lagGrowth.baseline)
			lagGrowth.mu.Unlock()
			if len(base) > 0 {
				slices.Sort(base)
				b.ReportMetric(growth-base[len(base)/2], "stalled-cost-MiB")
			}
		}
	})
}

// lagGrowth keeps the baseline runs' RSS growth for the stalled leaf, which runs after them.
var lagGrowth struct {
	mu       sync.Mutex
	baseline []float64
}

const (
	lagTopic       = "lag.bench"
	lagPayloadSize = 256
	lagReadFirst   = 5 // records the stalled subscriber reads before it stops
)

// lagRun runs one scenario on a fresh node process and returns its VmRSS growth in MiB.
func lagRun(b *testing.B, bin string, stalled bool) float64 {
	records := 1_000_000
	if v := os.Getenv("QUICMQ_BENCH_LAG_RECORDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("QUICMQ_BENCH_LAG_RECORDS=%q: want a positive integer", v)
		}
		records = n
	}
	b.StopTimer()
	data := b.TempDir()
	p := startLagNode(b, bin, data)
	defer p.Stop(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pub := dialLag(b, p.Addr, data)
	defer pub.Close()
	payload := make([]byte, lagPayloadSize)
	for i := range 10 { // create the topic, and the first records the subscriber reads
		payload[0] = byte(i)
		if _, err := pub.Publish(ctx, client.Message{Topic: lagTopic, Payload: payload}); err != nil {
			b.Fatal(err)
		}
	}
	var sub *client.Subscription
	if stalled {
		sc := dialLag(b, p.Addr, data)
		defer sc.Close()
		var err error
		if sub, err = sc.Subscribe(ctx, lagTopic, client.SubscribeOptions{From: client.Earliest}); err != nil {
			b.Fatal(err)
		}
		defer sub.Close()
		for range lagReadFirst {
			if _, err := sub.Next(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	testlog.Pause(context.Background(), 500*time.Millisecond) // a measurement: the node settles after startup and setup
	before := procMemory(b, p.Pid())
	cpuBefore := procCPU(b, p.Pid())
	b.Logf("stalled=%v: node pid %d, VmRSS %.1f MiB before publishing %d records of %d B", stalled, p.Pid(), before.rss, records, lagPayloadSize)

	b.StartTimer()
	start := time.Now()
	if err := nodetest.PublishPipelined(ctx, pub, lagTopic, payload, records); err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	testlog.Pause(context.Background(), time.Second) // a measurement: the subscription's sender runs into flow control, if it can
	after := procMemory(b, p.Pid())
	cpu := procCPU(b, p.Pid()) - cpuBefore
	lag, err := scrapeLag(p.Metrics)
	if err != nil {
		b.Fatal(err)
	}
	if stalled {
		// The subscriber is still there, at the record after the ones it read, and lagging.
		rec, err := sub.Next(ctx)
		if err != nil {
			b.Fatalf("stalled subscription after the run: %v", err)
		}
		if rec.Offset != lagReadFirst {
			b.Fatalf("stalled subscription resumed at offset %d, want %d", rec.Offset, lagReadFirst)
		}
		if lag < float64(records)*0.9 {
			b.Fatalf("the node reports a lag of %.0f records, want about %d: the subscriber did not stall", lag, records)
		}
	}
	growth := after.rss - before.rss
	b.Logf("stalled=%v: published %d records in %v (%.0f records/s); VmRSS %.1f -> %.1f MiB (%+.1f), VmHWM %.1f MiB; lag %.0f records; node CPU %.2f µs/record",
		stalled, records, elapsed.Round(time.Millisecond), float64(records)/elapsed.Seconds(), before.rss, after.rss, growth, after.hwm, lag, cpu.Seconds()*1e6/float64(records))
	b.ReportMetric(growth, "rss-growth-MiB")
	b.ReportMetric(after.rss, "rss-after-MiB")
	b.ReportMetric(after.hwm, "hwm-MiB")
	b.ReportMetric(lag, "lag-records")
	b.ReportMetric(float64(records)/elapsed.Seconds(), "records/s")
	b.ReportMetric(cpu.Seconds()*1e6/float64(records), "node-cpu-µs/record")
	return growth
}

// lagBinary builds this command into b's temporary directory, so that the benchmark runs
// real node processes.
func lagBinary(b *testing.B) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "quicmq")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startLagNode starts `quicmq node` on data (internal/nodeproc) with a metrics endpoint and
// profiles, as node "lag" of region "bench".
func startLagNode(b *testing.B, bin, data string) *nodeproc.Process {
	b.Helper()
	o := nodeproc.Options{StartTimeout: 30 * time.Second}
	return o.Start(b, bin, "lag", "--anonymous", "--data", data, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
		"--name", "lag", "--region", "bench", "--log-level", "info", "--pprof")
}

func dialLag(b *testing.B, addr, data string) *client.Conn {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{CAFile: filepath.Join(data, "tls", "ca.pem"), Name: "lag-bench"}, addr)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

type memory struct{ rss, hwm float64 } // MiB

// procMemory reads VmRSS (resident now) and VmHWM (peak resident) of a process, in MiB.
func procMemory(b testing.TB, pid int) memory {
	b.Helper()
	m, err := nodeproc.Memory(pid)
	if err != nil {
		b.Fatal(err)
	}
	return memory{rss: float64(m.RSS) / (1 << 20), hwm: float64(m.HWM) / (1 << 20)}
}

// procCPU is the user plus system CPU time a process used so far.
func procCPU(b testing.TB, pid int) time.Duration {
	b.Helper()
	d, err := nodeproc.CPU(pid)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// scrapeLag sums quicmq_subscription_lag_records over every subscription of the node.
func scrapeLag(url string) (float64, error) {
	lag, err := metricSumURL(url, "quicmq_subscription_lag_records")
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", url, err)
	}
	return lag, nil
}
