package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quicmq/quicmq/bench/lossy"
)

// init lets the test binary serve as the "setup worker" and "setup broker" processes that
// runSetup and measureSetup start (they exec this binary; TestMain in main_test.go handles
// the other scenarios' commands). It runs before TestMain and exits.
func init() {
	if len(os.Args) > 2 && os.Args[1] == "setup" && (os.Args[2] == "worker" || os.Args[2] == "broker") {
		if err := runSetup(os.Args[2:]); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// The whole command, tiny: every system at 1% loss and two levels, then QuicMQ behind the
// delaying relay. Every subscription is confirmed and gets its first record, the figures
// are filled in, the JSON and the plots are written and no namespace is left behind.
func TestSetupSmoke(t *testing.T) {
	if err := lossy.Check(); err != nil {
		t.Skipf("lossy-network harness unavailable: %v", err)
	}
	for _, c := range []struct {
		name    string
		args    []string
		systems []string
	}{
		{"loss", []string{"--loss", "1"}, setupSystems},
		{"delay", []string{"--delay", "2ms"}, []string{"quicmq"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := t.TempDir()
			args := append([]string{"--subs", "20", "--parallel", "1,4", "--repeat", "1", "--out", out}, c.args...)
			if err := runSetup(args); err != nil {
				t.Fatal(err)
			}
			files, err := filepath.Glob(filepath.Join(out, "setup-*.json"))
			if err != nil || len(files) != 1 {
				t.Fatalf("JSON files %v, %v", files, err)
			}
			b, err := os.ReadFile(files[0])
			if err != nil {
				t.Fatal(err)
			}
			var rs []*setupResult
			if err := json.Unmarshal(b, &rs); err != nil {
				t.Fatal(err)
			}
			if len(rs) != 2*len(c.systems) {
				t.Fatalf("%d results, want %d", len(rs), 2*len(c.systems))
			}
			for _, r := range rs {
				if r.Live != 20 || r.Errors != 0 || r.Rate <= 0 || r.CPUus <= 0 {
					t.Fatalf("%s parallel %d: live %d, errors %d (%s), rate %v, cpu %v", r.System, r.Parallel, r.Live, r.Errors, r.FirstError, r.Rate, r.CPUus)
				}
				if r.ConfirmP50 <= 0 || r.LiveP50 < r.ConfirmP50 || r.LiveP99 < r.LiveP50 || r.LiveMax < r.LiveP99 || len(r.CDFLive) == 0 {
					t.Fatalf("%s parallel %d: figures not filled in: %+v", r.System, r.Parallel, r)
				}
				t.Logf("%s parallel %d: %.0f subs/s, live p50 %.2f p99 %.2f ms, %d packets dropped", r.System, r.Parallel, r.Rate, r.LiveP50, r.LiveP99, r.DroppedPackets)
			}
			if pngs, _ := filepath.Glob(filepath.Join(out, "setup-*.png")); len(pngs) != 2 {
				t.Fatalf("plots %v, want one per level", pngs)
			}
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

func TestLatencySummary(t *testing.T) {
	ms := make([]float64, 0, 1000)
	for i := 1000; i >= 1; i-- {
		ms = append(ms, float64(i))
	}
	p50, p99, mx, cdf := latencySummary(ms)
	if p50 != 500 || p99 != 990 || mx != 1000 {
		t.Fatalf("p50 %v p99 %v max %v, want 500, 990, 1000", p50, p99, mx)
	}
	if first, last := cdf[0], cdf[len(cdf)-1]; first != [2]float64{1, 0} || last != [2]float64{1000, 1} {
		t.Fatalf("CDF from %v to %v", first, last)
	}
	for i := 1; i < len(cdf); i++ {
		if cdf[i][0] < cdf[i-1][0] || cdf[i][1] <= cdf[i-1][1] {
			t.Fatalf("CDF not increasing at %d: %v then %v", i, cdf[i-1], cdf[i])
		}
	}
	if _, _, _, cdf := latencySummary(nil); cdf != nil {
		t.Fatalf("empty input gave %v", cdf)
	}
}
