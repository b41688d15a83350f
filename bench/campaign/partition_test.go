package campaign

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/bench/lossy"
	"github.com/quicmq/quicmq/internal/testlog"
)

// Campaign 3: partitions. Two regions of two nodes each, each region in its own namespace,
// joined by a veth pair (lossy.Link), mirroring c3.> both ways. Under steady publishing in
// both regions, the path between the regions is cut in turn: both ways (a whole region cut),
// one way (packets from us to eu dropped, eu to us delivered), and flapping (cut and healed
// every 5 s). After each fault is healed the test waits until both regions hold the same
// records of every topic (time to converge); at the end every region's logs are read back
// and judged (Check): no acknowledged record lost, none duplicated, mirrors converged.
//
// Default: cut 5 s, one-way 5 s, flapping 11 s (cut, healed, cut again). QUICMQ_CAMPAIGN_LONG=1: cut 30 s, cut
// 5 min, one-way 1 min, flapping 2 min.
func TestCampaignPartitions(t *testing.T) {
	type scenario = partitionScenario
	scenarios := []scenario{{"region cut", 5 * time.Second}, {"one-way", 5 * time.Second}, {"flapping", 11 * time.Second}}
	if long() {
		scenarios = []scenario{{"region cut", 30 * time.Second}, {"region cut", 5 * time.Minute}, {"one-way", time.Minute}, {"flapping", 2 * time.Minute}}
	}
	partitionCampaign(t, 1, scenarios)
}

// TestCampaignPartitionsReplicated is campaign 3 on replicated regions: two regions of three
// nodes started with --replicas 3, so every topic is a raft group in each region and each
// region's mirror appends are CAS entries of its groups; the same faults and judge.
// Default: one cut of 5 s and one-way 5 s; QUICMQ_CAMPAIGN_LONG=1: cut 30 s, cut 5 min,
// one-way 1 min, flapping 2 min.
func TestCampaignPartitionsReplicated(t *testing.T) {
	type scenario = partitionScenario
	scenarios := []scenario{{"region cut", 5 * time.Second}, {"one-way", 5 * time.Second}}
	if long() {
		scenarios = []scenario{{"region cut", 30 * time.Second}, {"region cut", 5 * time.Minute}, {"one-way", time.Minute}, {"flapping", 2 * time.Minute}}
	}
	partitionCampaign(t, 3, scenarios)
}

type partitionScenario struct {
	name string
	d    time.Duration
}

// partitionCampaign runs campaign 3 with regions of two single-copy nodes (replicas 1) or of
// three nodes with --replicas 3.
func partitionCampaign(t *testing.T, replicas int, scenarios []partitionScenario) {
	needHarness(t)
	prefix := "c3"
	if replicas > 1 {
		prefix = "c3r"
	}
	nsEU, err := lossy.New(prefix + "eu")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nsEU.Close() })
	nsUS, err := lossy.New(prefix + "us")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nsUS.Close() })
	link, err := lossy.Connect(nsEU, nsUS)
	if err != nil {
		t.Fatal(err)
	}
	euIf, err := vethName(nsEU)
	if err != nil {
		t.Fatal(err)
	}
	caDir := t.TempDir()

	specs := []meshNode{{"eu1", "eu", link.AddrA, nsEU}, {"eu2", "eu", link.AddrA, nsEU}, {"us1", "us", link.AddrB, nsUS}, {"us2", "us", link.AddrB, nsUS}}
	var extra []string
	if replicas > 1 {
		specs = []meshNode{{"eu1", "eu", link.AddrA, nsEU}, {"eu2", "eu", link.AddrA, nsEU}, {"eu3", "eu", link.AddrA, nsEU},
			{"us1", "us", link.AddrB, nsUS}, {"us2", "us", link.AddrB, nsUS}, {"us3", "us", link.AddrB, nsUS}}
		extra = replicatedFlags
	}
	nodes, byRegion := startMesh(t, specs, caDir, "c3.>", extra...)
	t.Logf("%d regions of %d nodes, --replicas %d", len(byRegion), len(byRegion["eu"]), replicas)
	topics := []string{"c3.a", "c3.b", "c3.c", "c3.d"}
	nss := map[string]*lossy.Namespace{"eu": nsEU, "us": nsUS}

	total := time.Duration(0)
	for _, s := range scenarios {
		total += s.d
	}
	ctx, cancel := context.WithTimeout(context.Background(), total+time.Duration(len(scenarios))*4*time.Minute)
	defer cancel()
	var acks []Ack
	attempted := map[string]uint64{}
	const rate = 300 // records/s per region
	for i, s := range scenarios {
		// Publish in both regions for the whole fault, while this goroutine makes it.
		results := make(chan *pubResult, 2)
		errs := make(chan error, 2)
		for _, r := range []string{"eu", "us"} {
			go func() {
				res, err := publish(ctx, nss[r], caDir, fmt.Sprintf("%s-s%d", r, i), r, byRegion[r], topics, rate, s.d)
				if err != nil {
					errs <- err
					return
				}
				results <- res
			}()
		}
		start := time.Now()
		flaps := 0
		switch s.name {
		case "region cut":
			must(t, link.Partition())
			testlog.Pause(ctx, s.d) // the fault's length
			must(t, link.Heal())
		case "one-way":
			must(t, nsEU.Run("nft", fmt.Sprintf("add table inet c3oneway; add chain inet c3oneway in { type filter hook input priority -20; policy accept; }; add rule inet c3oneway in iifname %q drop", euIf)))
			testlog.Pause(ctx, s.d) // the fault's length
			must(t, nsEU.Run("nft", "delete table inet c3oneway"))
		case "flapping":
			for cut := true; time.Since(start) < s.d; cut = !cut {
				if cut {
					must(t, link.Partition())
					flaps++
				} else {
					must(t, link.Heal())
				}
				testlog.Pause(ctx, min(5*time.Second, s.d-time.Since(start))) // one flap
			}
			must(t, link.Heal())
		}
		healed := time.Now()
		var line []string
		for range 2 {
			select {
			case err := <-errs:
				t.Fatal(err)
			case res := <-results:
				acks = append(acks, res.acks...)
				attempted[res.producer] = res.attempted
				line = append(line, fmt.Sprintf("%s: %d acked of %d, ack latency p50 %v p99 %v, %d unavailable, %d failed %v",
					res.producer, len(res.acks), res.attempted, res.p50.Round(time.Millisecond), res.p99.Round(time.Millisecond), res.unavailable, res.failed, res.errSamples))
			}
		}
		final, err := converge(ctx, []*lossy.Namespace{nsEU, nsUS}, caDir, []string{byRegion["eu"][0].addr, byRegion["us"][0].addr}, topics)
		if err != nil {
			t.Fatalf("%s: %v\neu1:\n%s\nus1:\n%s", s.name, err, nodes[0].tail(), byRegion["us"][0].tail())
		}
		what := s.name
		if flaps > 0 {
			what += fmt.Sprintf(" (%d cuts)", flaps)
		}
		t.Logf("%s for %v: converged %v after the heal (%v records per region)", what, s.d,
			time.Since(healed).Round(time.Millisecond), final)
		for _, l := range line {
			t.Logf("  %s", l)
		}
	}
	logs := map[string]map[string][]Rec{}
	for _, r := range []string{"eu", "us"} {
		if logs[r], err = readLogs(ctx, nss[r], caDir, byRegion[r][1].addr, topics); err != nil {
			t.Fatal(err)
		}
	}
	rep := Check(acks, logs, attempted)
	t.Logf("judge: %v", rep)
	if !rep.OK() {
		t.Fatal("campaign 3 failed the judge")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// vethName returns the name of the (only) veth interface in ns, the end of a lossy.Link.
func vethName(ns *lossy.Namespace) (string, error) {
	out, err := ns.Command(context.Background(), "ip", "-o", "link", "show", "type", "veth").Output()
	if err != nil {
		return "", fmt.Errorf("campaign: list veth in %s: %w", ns.Name, err)
	}
	// "7: qa123-1@if6: <BROADCAST,...> ..."
	f := strings.Fields(string(out))
	if len(f) < 2 {
		return "", fmt.Errorf("campaign: no veth in %s", ns.Name)
	}
	name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
	return name, nil
}
