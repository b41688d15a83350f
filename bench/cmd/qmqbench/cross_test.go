package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/bench/lossy"
)

// init lets the test binary serve as the cross scenario's helpers (crossOnce starts
// os.Executable()): it runs before TestMain, which knows only the fan-out's helpers.
func init() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "crosspub", "crosssub", "crossrelay":
			if err := runCrossCommand(os.Args[1], os.Args[2:]); err != nil {
				os.Stderr.WriteString(err.Error() + "\n")
				os.Exit(1)
			}
			os.Exit(0)
		}
	}
}

// Scenario 6, tiny: two regions in two namespaces, 1% loss on the link, both link
// mappings. Every record published in region a in the window reaches the subscriber in
// region b through the mirror, and the figures are filled in. Quick enough for -short.
func TestCrossSmoke(t *testing.T) {
	if err := lossy.Check(); err != nil {
		t.Skipf("lossy-network harness unavailable: %v", err)
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to build cmd/quicmq")
	}
	bin, cleanup, err := buildQuicmq(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	delay := time.Duration(0)
	if !testing.Short() {
		delay = 5 * time.Millisecond // the relay too
	}
	for _, mode := range crossModes {
		t.Run(mode, func(t *testing.T) {
			p := runParams{System: mode, Loss: 0.01, Rate: 500, Subs: 10, Size: 64, Delay: delay,
				Warmup: 300 * time.Millisecond, Duration: 1500 * time.Millisecond, Drain: 10 * time.Second}
			cr, err := crossOnce(bin, p)
			if err != nil {
				t.Fatal(err)
			}
			res := cr.runResult
			if cr.LinkAB.Packets == 0 || cr.Published < res.Sent {
				t.Fatalf("link counters: %+v a->b, %d published", cr.LinkAB, cr.Published)
			}
			if res.Sent < 500 || res.Received != res.Sent || res.Missing != 0 {
				t.Fatalf("sent %d, received %d, missing %d", res.Sent, res.Received, res.Missing)
			}
			if res.P50 <= 0 || res.P99 < res.P50 || len(res.CDF) == 0 || len(res.PerSubLongest) != p.Subs {
				t.Fatalf("figures not filled in: %+v", res)
			}
			if res.P50 < delay.Seconds()*1000 {
				t.Fatalf("p50 %.2f ms is below the relay's one-way delay %v: the link did not go through it", res.P50, delay)
			}
			t.Logf("%s: p50 %.2f p99 %.2f ms, longest stall %.0f ms, %d packets dropped, setup %.1f s",
				mode, res.P50, res.P99, res.LongestStall, res.DroppedPackets, res.SetupSeconds)
		})
	}
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if mine := fmt.Sprintf("%s%d-", lossy.Prefix, os.Getpid()); strings.Contains(string(out), mine) {
		t.Fatalf("namespaces left behind:\n%s", out)
	}
}
