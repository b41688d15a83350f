package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
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
	defer p.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pub := dialLag(b, p.addr, data)
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
		sc := dialLag(b, p.addr, data)
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
	before := procMemory(b, p.pid())
	cpuBefore := procCPU(b, p.pid())
	b.Logf("stalled=%v: node pid %d, VmRSS %.1f MiB before publishing %d records of %d B", stalled, p.pid(), before.rss, records, lagPayloadSize)

	b.StartTimer()
	start := time.Now()
	if err := nodetest.PublishPipelined(ctx, pub, lagTopic, payload, records); err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	testlog.Pause(context.Background(), time.Second) // a measurement: the subscription's sender runs into flow control, if it can
	after := procMemory(b, p.pid())
	cpu := procCPU(b, p.pid()) - cpuBefore
	lag, err := scrapeLag(p.metrics)
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

// lagNode is a `quicmq node` child process with a metrics endpoint.
type lagNode struct {
	cmd     *exec.Cmd
	addr    string // QUIC listener
	metrics string // http://.../metrics
	exited  chan struct{}
	once    sync.Once
}

var lagMetricsRE = regexp.MustCompile(`metrics on (http://[^\s,]+/metrics)`)

func startLagNode(b *testing.B, bin, data string) *lagNode {
	b.Helper()
	cmd := exec.Command(bin, "node", "--anonymous", "--data", data, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
		"--name", "lag", "--region", "bench", "--log-level", "info", "--pprof")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &lagNode{cmd: cmd, exited: make(chan struct{})}
	addr, metrics := make(chan string, 1), make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := listeningRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
			if m := lagMetricsRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case metrics <- m[1]:
				default:
				}
			}
		}
		io.Copy(io.Discard, stderr)
		cmd.Wait()
		close(p.exited)
	}()
	timeout := time.After(30 * time.Second)
	for p.addr == "" || p.metrics == "" {
		select {
		case p.addr = <-addr:
		case p.metrics = <-metrics:
		case <-p.exited:
			b.Fatalf("node exited before listening: %v", cmd.ProcessState)
		case <-timeout:
			p.stop()
			b.Fatal("node did not start listening within 30 s")
		}
	}
	b.Cleanup(p.stop)
	return p
}

func (p *lagNode) pid() int { return p.cmd.Process.Pid }

// stop ends the node with SIGTERM (a graceful stop), or SIGKILL after 10 s.
func (p *lagNode) stop() {
	p.once.Do(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
			<-p.exited
		}
	})
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

// procMemory reads VmRSS (resident now) and VmHWM (peak resident) of a process.
func procMemory(b testing.TB, pid int) memory {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	var m memory
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[2] != "kB" {
			continue
		}
		kb, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			m.rss = kb / 1024
		case "VmHWM:":
			m.hwm = kb / 1024
		}
	}
	if m.rss == 0 {
		b.Fatalf("no VmRSS in /proc/%d/status", pid)
	}
	return m
}

// procCPU is the user plus system CPU time a process used so far.
func procCPU(b testing.TB, pid int) time.Duration {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		b.Fatalf("/proc/%d/stat: %v", pid, err)
	}
	const ticksPerSecond = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticksPerSecond
}

// scrapeLag sums quicmq_subscription_lag_records over every subscription of the node.
func scrapeLag(url string) (float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", url, err)
	}
	var lag float64
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "quicmq_subscription_lag_records") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("scrape %s: %q: %w", url, line, err)
		}
		lag += v
	}
	return lag, nil
}
