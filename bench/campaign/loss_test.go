package campaign

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/bench/lossy"
)

// Campaign 4: packet loss. Two regions of two nodes each, all in one namespace on its
// loopback, mirroring c4.> both ways; the publishing workers run in the same namespace. The
// namespace drops a random share of every packet on the input hook (QUIC between clients and
// nodes, QUIC links between nodes, serf's UDP and TCP), at 0, 1, 5 and 20 %, each for a
// phase during which each region's producer publishes as fast as its window allows (the
// throughput figure), then, in the long run, for minutes at a steady 1,000 records/s per
// region. The judges: no acknowledged record lost or duplicated and the mirrors converged
// (Check), and no member failure reported by any node's gossip
// (quicmq_gossip_events_total{kind="fail"}) at any rate.
//
// QUICMQ_CAMPAIGN_LOSS_RATES (percent, comma-separated) picks the rates.
// Default: 2 s flat out per rate; QUICMQ_CAMPAIGN_LONG=1: 10 s flat out, then 2 min at
// 1,000 records/s per region, per rate.
func TestCampaignPacketLoss(t *testing.T) {
	lossCampaign(t, 1, []float64{0, 0.01, 0.05, 0.20})
}

// TestCampaignPacketLossReplicated is campaign 4 on replicated regions: two regions of three
// nodes started with --replicas 3 (raft between the replicas of each region, mirroring between
// the regions), every packet of the namespace meeting the loss; the same judges. Default: 0,
// 5 and 20 %; QUICMQ_CAMPAIGN_LONG=1: 0, 1, 5 and 20 % as campaign 4; QUICMQ_CAMPAIGN_LOSS_RATES
// as for campaign 4.
func TestCampaignPacketLossReplicated(t *testing.T) {
	rates := []float64{0, 0.05, 0.20}
	if long() {
		rates = []float64{0, 0.01, 0.05, 0.20}
	}
	lossCampaign(t, 3, rates)
}

// lossCampaign runs campaign 4 with regions of two single-copy nodes (replicas 1) or of
// three nodes with --replicas 3, at the loss rates given (QUICMQ_CAMPAIGN_LOSS_RATES wins).
func lossCampaign(t *testing.T, replicas int, rates []float64) {
	needHarness(t)
	phase, steady := 2*time.Second, time.Duration(0)
	if long() {
		phase, steady = 10*time.Second, 2*time.Minute
	}
	name, regionSize, extra := "c4", 2, []string(nil)
	if replicas > 1 {
		name, regionSize, extra = "c4r", 3, replicatedFlags
	}
	ns, err := lossy.New(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	caDir := t.TempDir()

	var specs []meshNode
	for _, r := range []string{"eu", "us"} {
		for i := 1; i <= regionSize; i++ {
			specs = append(specs, meshNode{name: fmt.Sprintf("%s%d", r, i), region: r, ip: "127.0.0.1", ns: ns})
		}
	}
	nodes, byRegion := startMesh(t, specs, caDir, "c4.>", extra...)
	t.Logf("%d regions of %d nodes, --replicas %d", len(byRegion), regionSize, replicas)
	topics := []string{"c4.a", "c4.b", "c4.c", "c4.d"}

	ctx, cancel := context.WithTimeout(context.Background(), 4*(phase+steady)+5*time.Minute)
	defer cancel()
	var acks []Ack
	attempted := map[string]uint64{}
	failsBefore, err := gossipFails(ctx, ns, nodes)
	if err != nil {
		t.Fatal(err)
	}
	if v := os.Getenv("QUICMQ_CAMPAIGN_LOSS_RATES"); v != "" { // e.g. "20" or "1,5"
		rates = nil
		for _, f := range strings.Split(v, ",") {
			r, err := strconv.ParseFloat(f, 64)
			if err != nil {
				t.Fatalf("QUICMQ_CAMPAIGN_LOSS_RATES: %v", err)
			}
			rates = append(rates, r/100)
		}
	}
	for _, rate := range rates {
		if err := ns.SetLoss(rate); err != nil {
			t.Fatal(err)
		}
		dropped0, _ := ns.Dropped()
		// run publishes in both regions at pubRate (0: flat out) for d.
		run := func(tag string, pubRate int, d time.Duration) (total int, line []string) {
			results := make(chan *pubResult, 2)
			errs := make(chan error, 2)
			for _, r := range []string{"eu", "us"} {
				go func() {
					res, err := publish(ctx, ns, caDir, fmt.Sprintf("%s-%s%g", r, tag, rate*100), r, byRegion[r], topics, pubRate, d)
					if err != nil {
						errs <- err
						return
					}
					results <- res
				}()
			}
			for range 2 {
				select {
				case err := <-errs:
					t.Fatal(err)
				case res := <-results:
					acks = append(acks, res.acks...)
					attempted[res.producer] = res.attempted
					total += len(res.acks)
					line = append(line, fmt.Sprintf("%s: %d acked of %d (%.0f/s), ack latency p50 %v p99 %v max %v, %d unavailable, %d failed %v",
						res.producer, len(res.acks), res.attempted, float64(len(res.acks))/d.Seconds(),
						res.p50.Round(time.Millisecond), res.p99.Round(time.Millisecond), res.maxLatency.Round(time.Millisecond), res.unavailable, res.failed, res.errSamples))
				}
			}
			return total, line
		}
		total, line := run("loss", 0, phase)
		if steady > 0 {
			_, more := run("steady", 1000, steady)
			line = append(line, more...)
		}
		dropped, _ := ns.Dropped()
		// Scrape without loss (the failure counters are cumulative, so nothing is missed).
		if err := ns.SetLoss(0); err != nil {
			t.Fatal(err)
		}
		fails, pools, err := gossipFailsByPool(ctx, ns, nodes)
		if err != nil {
			t.Fatal(err)
		}
		falseDeaths := 0
		for name, n := range fails {
			falseDeaths += n - failsBefore[name]
		}
		t.Logf("loss %g%% for %v: %.0f records/s acknowledged in all flat out; %d packets dropped; member failures reported: %d",
			rate*100, phase+steady, float64(total)/phase.Seconds(), dropped-dropped0, falseDeaths)
		for _, l := range line {
			t.Logf("  %s", l)
		}
		if falseDeaths > 0 {
			t.Errorf("loss %g%%: gossip declared a live node failed (failures seen by node %v, before %v; by pool, all along: %v)", rate*100, fails, failsBefore, pools)
		}
		failsBefore = fails
	}
	if err := ns.SetLoss(0); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	final, err := converge(ctx, []*lossy.Namespace{ns, ns}, caDir, []string{byRegion["eu"][0].addr, byRegion["us"][0].addr}, topics)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("converged %v after the loss stopped: %v", time.Since(healed).Round(time.Millisecond), final)
	logs := map[string]map[string][]Rec{}
	for _, r := range []string{"eu", "us"} {
		if logs[r], err = readLogs(ctx, ns, caDir, byRegion[r][1].addr, topics); err != nil {
			t.Fatal(err)
		}
	}
	rep := Check(acks, logs, attempted)
	t.Logf("judge: %v", rep)
	if !rep.OK() {
		t.Fatal("campaign 4 failed the judge")
	}
}
