package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/bench/lossy"
)

// TestMain lets the test binary serve as the worker and broker processes that
// runInNamespace and startBroker start (they exec /proc/self/exe).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "worker":
			if err := runWorker(os.Args[2:]); err != nil {
				os.Stderr.WriteString(err.Error() + "\n")
				os.Exit(1)
			}
			os.Exit(0)
		case "durworker":
			if err := runDurWorker(os.Args[2:]); err != nil {
				os.Stderr.WriteString(err.Error() + "\n")
				os.Exit(1)
			}
			os.Exit(0)
		case "broker":
			if err := runBroker(os.Args[2:]); err != nil {
				os.Stderr.WriteString(err.Error() + "\n")
				os.Exit(1)
			}
			os.Exit(0)
		}
	}
	os.Exit(m.Run())
}

// A few seconds of each system at 1% loss, in a namespace of its own: every record
// published in the window reaches every subscription, and the figures are filled in.
func TestFanoutSmoke(t *testing.T) {
	if err := lossy.Check(); err != nil {
		t.Skipf("lossy-network harness unavailable: %v", err)
	}
	systems := systemNames
	if testing.Short() {
		systems = []string{"quicmq", "ablation"}
	}
	for _, sys := range systems {
		t.Run(sys, func(t *testing.T) {
			p := runParams{System: sys, Loss: 0.01, Rate: 1000, Subs: 10, Size: 64,
				Warmup: 300 * time.Millisecond, Duration: time.Second, Drain: 5 * time.Second, LossPath: "all", Slow: 0}
			res, err := runInNamespace(p, &workerSlot{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Sent < 500 || res.Received != res.Sent || res.Missing != 0 {
				t.Fatalf("sent %d, received %d, missing %d", res.Sent, res.Received, res.Missing)
			}
			if res.P50 <= 0 || res.P99 < res.P50 || len(res.CDF) == 0 || len(res.PerSubLongest) != p.Subs {
				t.Fatalf("figures not filled in: %+v", res)
			}
			t.Logf("%s: p50 %.2f p99 %.2f ms, longest stall %.0f ms, %d packets dropped", sys, res.P50, res.P99, res.LongestStall, res.DroppedPackets)
		})
	}
	// Only this process's namespaces: other processes on the machine may use the harness too.
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if mine := fmt.Sprintf("%s%d-", lossy.Prefix, os.Getpid()); strings.Contains(string(out), mine) {
		t.Fatalf("namespaces left behind:\n%s", out)
	}
}

// analyse: latencies are publish-to-delivery; a stall is the gap between two records of a
// subscription beyond the publish interval; the slow subscriptions are left out.
func TestAnalyse(t *testing.T) {
	win := time.Unix(100, 0)
	p := runParams{Rate: 200, Subs: 2, Slow: 1, Duration: time.Second} // 10 ms per topic
	ms := func(v float64) int64 { return win.UnixNano() + int64(v*1e6) }
	samples := [][]sample{
		{{ms(0), ms(500)}}, // the slow one: ignored
		{{ms(0), ms(1)}, {ms(10), ms(11)}, {ms(20), ms(101)}, {ms(30), ms(102)}, {ms(40), ms(500)}},
	}
	res := &runResult{runParams: p}
	analyse(res, samples, []int{1, 6}, win, win.Add(time.Second))
	if res.Received != 5 || res.Missing != 1 {
		t.Fatalf("received %d missing %d, want 5 and 1", res.Received, res.Missing)
	}
	// Gaps: 10, 90, 1, 398 ms; minus the 10 ms interval: 0, 80, -9, 388. One record never
	// came: 500 ms from the last one to the window's end, 490 beyond the interval.
	if res.LongestStall != 490 || res.Stalls != 3 || res.SubsStalled != 1 {
		t.Fatalf("longest %v stalls %d subs %d", res.LongestStall, res.Stalls, res.SubsStalled)
	}
	if res.P50 != 72 || res.Max != 460 {
		t.Fatalf("p50 %v max %v, want 72 and 460", res.P50, res.Max)
	}
}
