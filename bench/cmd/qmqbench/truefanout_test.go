package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/bench/lossy"
)

// init lets the test binary serve as the hidden commands of the one-topic, replicated and
// groups scenarios, of the raw Pebble writer and of the QUIC sink (TestMain in main_test.go handles the others). It runs before
// TestMain and exits.
func init() {
	if len(os.Args) < 2 {
		return
	}
	var run func([]string) error
	switch os.Args[1] {
	case "tfworker":
		run = runTFWorker
	case "hetworker":
		run = runHetWorker
	case "rawpebble":
		run = runRawPebble
	case "quicsink":
		run = runQUICSink
	case "repworker":
		run = runRepWorker
	case "jsnode":
		run = runJSNode
	case "grpworker":
		run = runGrpWorker
	default:
		return
	}
	if err := run(os.Args[2:]); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	os.Exit(0)
}

func needHarness(t *testing.T) {
	t.Helper()
	if err := lossy.Check(); err != nil {
		t.Skipf("lossy-network harness unavailable: %v", err)
	}
}

// Two short steps of one topic read by 10 subscriptions over 2 connections: every record
// reaches every subscription and the step's figures are filled in.
func TestTrueFanoutSmoke(t *testing.T) {
	needHarness(t)
	systems := fanSystemNames
	if testing.Short() {
		systems = []string{"quicmq"}
	}
	for _, sys := range systems {
		t.Run(sys, func(t *testing.T) {
			p := tfParams{System: sys, Subs: 10, Conns: 2, Size: 64, Start: 1000, Factor: 2, Max: 2000,
				Step: 500 * time.Millisecond, Drain: 5 * time.Second, P99Limit: 50, MinShare: 0.98}
			var res tfResult
			if err := workerIn(sys, 2*time.Minute, func(string) []string { return p.args() }, &res, &workerSlot{}); err != nil {
				t.Fatal(err)
			}
			if len(res.Steps) == 0 {
				t.Fatal("no steps")
			}
			st := res.Steps[0]
			if st.Published < 40 || st.Expected != int64(st.Published)*10 || st.Delivered != st.Expected {
				t.Fatalf("step 1: published %d, expected %d, delivered %d", st.Published, st.Expected, st.Delivered)
			}
			// CPU comes in 10 ms ticks (/proc/PID/stat): NATS core may spend less on a short step.
			if st.P50 <= 0 || st.P99 < st.P50 || st.BrokerCPUus < 0 || st.ClientCPUus <= 0 {
				t.Fatalf("step 1 figures not filled in: %+v", st)
			}
			if st.Held != (st.Broke == "") || res.Held != heldStep(&res).Deliveries {
				t.Fatalf("held %v, broke %q, result held %v", st.Held, st.Broke, res.Held)
			}
			t.Logf("%s: %+v", sys, res.Steps)
		})
	}
}

// One bad connection of three (5% loss, 50 ms round trip through the relay): the clean ones
// get every record, and so does the bad one in the end (QUIC recovers its losses). QuicMQ's
// run also profiles its node over the window (--window-profile) and reads its heap and GCs.
func TestHeteroSmoke(t *testing.T) {
	needHarness(t)
	systems := []string{"quicmq", "nats"}
	if testing.Short() {
		systems = systems[:1]
	}
	for _, sys := range systems {
		t.Run(sys, func(t *testing.T) {
			p := hetParams{System: sys, Conns: 3, Bad: true, BadLoss: 0.05, BadRTT: 50 * time.Millisecond,
				Rate: 200, Size: 64, Warmup: 200 * time.Millisecond, Duration: time.Second, Drain: 5 * time.Second}
			if sys == "quicmq" {
				p.WindowProfile, p.ProfileName = t.TempDir(), "smoke"
			}
			var res hetResult
			err := workerIn(sys, 2*time.Minute, func(ns string) []string { p.NS = ns; return p.args() }, &res, &workerSlot{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Published < 150 || res.CleanExpected != int64(2*res.Published) || res.CleanDelivered != res.CleanExpected {
				t.Fatalf("published %d, clean expected %d, delivered %d", res.Published, res.CleanExpected, res.CleanDelivered)
			}
			if res.BadDelivered != res.BadExpected || res.BadExpected != int64(res.Published) {
				t.Fatalf("bad connection: %d of %d", res.BadDelivered, res.BadExpected)
			}
			// The bad path adds 25 ms each way: its median cannot be below it.
			if res.CleanP99 <= 0 || res.BadP50 < 25 {
				t.Fatalf("figures: clean p99 %v, bad p50 %v", res.CleanP99, res.BadP50)
			}
			if res.MachineBusyPct <= 0 || res.MachineBusyPct > 100 {
				t.Fatalf("machine %v%% busy", res.MachineBusyPct)
			}
			if len(res.CleanP99PerSecond) != 1 || res.CleanP99SecMedian != res.CleanP99PerSecond[0] || res.CleanP99SecMedian <= 0 {
				t.Fatalf("p99 by second %v, median %v", res.CleanP99PerSecond, res.CleanP99SecMedian)
			}
			if sys == "quicmq" {
				if fi, err := os.Stat(filepath.Join(p.WindowProfile, "smoke-node.pprof")); err != nil || fi.Size() == 0 {
					t.Fatalf("window profile: %v (notes %v)", err, res.Notes)
				}
				if res.NodeHeapStartMiB <= 0 {
					t.Fatalf("node heap %v MiB at the start (notes %v)", res.NodeHeapStartMiB, res.Notes)
				}
			}
			t.Logf("%s: clean p99 %.1f ms, bad p50 %.1f p99 %.1f ms, %d packets dropped, node %d GCs, worker %d", sys, res.CleanP99, res.BadP50, res.BadP99, res.DroppedPackets, res.NodeGCs, res.WorkerGCs)
		})
	}
}

// A second of durable publishing from 2 connections, then the raw Pebble writer with the
// node's batch size: both CPU figures are filled in.
func TestPublishRawPebbleSmoke(t *testing.T) {
	needHarness(t)
	p := durParams{Mode: "publish", System: "quicmq", Publishers: 2, Size: 1024, Duration: time.Second, RawPebble: true}
	var res durResult
	if err := workerIn("quicmq", 2*time.Minute, func(string) []string { return p.args() }, &res, &workerSlot{}); err != nil {
		t.Fatal(err)
	}
	if res.Records < 100 || res.Errors != 0 || res.BrokerCPUus <= 0 {
		t.Fatalf("node: %d records, %d errors, %v cpu-µs/record", res.Records, res.Errors, res.BrokerCPUus)
	}
	if res.NodeRecordsPerCommit < 1 || res.RawRate <= 0 || res.RawCPUus <= 0 || res.RawFsyncs <= 0 {
		t.Fatalf("raw pebble: %+v", res)
	}
	if res.SinkRate <= 0 || res.SinkCPUus <= 0 {
		t.Fatalf("quic sink: %v records/s, %v cpu-µs/record", res.SinkRate, res.SinkCPUus)
	}
	t.Logf("node %.1f cpu-µs/record at %.0f records/commit; raw pebble %.1f cpu-µs/record, %.0f records/s; quic sink %.1f cpu-µs/record, %.0f records/s",
		res.BrokerCPUus, res.NodeRecordsPerCommit, res.RawCPUus, res.RawRate, res.SinkCPUus, res.SinkRate)
}

// report redraws a truefanout run from its JSON: the table and one bar per system and
// (S, C), a system missing at one (S, C) drawing no bar there.
func TestReportTrueFanout(t *testing.T) {
	dir := t.TempDir()
	rs := []*tfResult{
		{tfParams: tfParams{System: "quicmq", Subs: 10, Conns: 1, P99Limit: 50}, Held: 640000},
		{tfParams: tfParams{System: "nats", Subs: 10, Conns: 1, P99Limit: 50}, Held: 1280000},
		{tfParams: tfParams{System: "quicmq", Subs: 100, Conns: 10, P99Limit: 50}, Held: 320000},
	}
	b, err := json.Marshal(rs)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "truefanout-20261202-000000.json")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := runReport([]string{file}); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(dir, "truefanout-20261202-000000.png")); err != nil || st.Size() == 0 {
		t.Fatalf("plot: %v", err)
	}
	if err := os.WriteFile(file, []byte("[{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := runReport([]string{file}); err == nil || !strings.Contains(err.Error(), file) {
		t.Fatalf("a truncated file: %v, want an error naming it", err)
	}
}
