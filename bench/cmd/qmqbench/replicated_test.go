package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A binary without `node --replicas` is refused for R3 with an error that says so.
func TestReplicatedRefusesR3WithoutReplicas(t *testing.T) {
	err := checkReplicasFlag("/bin/true")
	if err == nil || !strings.Contains(err.Error(), "no 'node --replicas' flag") || !strings.Contains(err.Error(), "R3 cannot run") {
		t.Fatalf("got %v", err)
	}
	if _, err := startQuicmqRegion("/bin/true", 3, 3, false); err == nil || !strings.Contains(err.Error(), "--replicas") {
		t.Fatalf("startQuicmqRegion: got %v", err)
	}
}

// A second of publishing from 2 clients: acks counted, latencies and CPU filled in, no
// errors. With -short QuicMQ only: R3 when the built quicmq has --replicas, else R1.
func TestReplicatedSmoke(t *testing.T) {
	needHarness(t)
	bin, cleanup, err := buildQuicmq(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	r3 := checkReplicasFlag(bin) == nil
	systems := []string{"quicmq-r1", "jetstream-r3"}
	if r3 {
		systems = append(systems, "quicmq-r3")
	}
	if testing.Short() {
		systems = systems[:1]
		if r3 {
			systems = []string{"quicmq-r3"}
		}
	}
	for _, sys := range systems {
		t.Run(sys, func(t *testing.T) {
			p := repParams{System: sys, Clients: 2, Size: 1024, Window: 256, Warmup: 300 * time.Millisecond, Duration: time.Second, Quicmq: bin}
			var res repResult
			if err := workerIn(sys, 3*time.Minute, func(string) []string { return p.args() }, &res, &workerSlot{}); err != nil {
				t.Fatal(err)
			}
			wantNodes := 1
			if strings.HasSuffix(sys, "r3") {
				wantNodes = 3
			}
			if res.Records < 100 || res.Errors != 0 || res.Nodes != wantNodes {
				t.Fatalf("%d records, %d errors %v, %d nodes", res.Records, res.Errors, res.Notes, res.Nodes)
			}
			if res.P50 <= 0 || res.P99 < res.P50 || res.BrokerCPUus <= 0 || res.AckMeans == "" {
				t.Fatalf("figures not filled in: %+v", res)
			}
			if sys == "quicmq-r3" && (len(res.Hops) == 0 || res.UDPDatagrams <= 0) {
				t.Fatalf("no hop counters: %v, %.2f datagrams a record, notes %v", res.Hops, res.UDPDatagrams, res.Notes)
			}
			t.Logf("%s: %.0f records/s, ack p50 %.2f p99 %.1f ms", sys, res.Rate, res.P50, res.P99)
		})
	}
}
