package main

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// The loss scenario's figure of issue 15: the share of records delayed by more than the path's
// one-way delay plus one round trip, that is the records that waited for a loss recovery
// (their own or, on a shared stream, another record's). A record's latency here is publish to
// arrival, so it also holds the node's durable commit and its processing. The threshold is a
// property of the path, not of the mapping: one per loss rate and repeat, shared by every
// system measured there, the lowest of their median latencies (the path's one-way delay plus
// the node's typical time, in the mapping that waits least) plus one round trip (2 x --delay,
// at least lateMinRTT on a path without added delay, where loopback's round trip of
// microseconds is below the timer granularity that loss recovery works at). A system's own
// median would not do: the shared stream's median itself rises with the records held behind
// a loss (2% loss, 50 ms round trip: 39-47 ms against 27), which would lift its threshold
// and hide its late records.
const lateMinRTT = time.Millisecond

// lateShare returns the share (0-1) of the sorted latencies lat (ms) above threshold (ms).
func lateShare(lat []float64, threshold float64) float64 {
	if len(lat) == 0 {
		return 0
	}
	i := sort.Search(len(lat), func(i int) bool { return lat[i] > threshold }) // "more than"
	return float64(len(lat)-i) / float64(len(lat))
}

// lateThreshold is the threshold for a path with one-way delay oneWay whose least delayed
// system had median latency p50 (ms).
func lateThreshold(p50 float64, oneWay time.Duration) float64 {
	return p50 + float64(max(2*oneWay, lateMinRTT))/1e6
}

// shareLateThresholds sets Late and LateMs of every result that kept its latencies (Lat)
// against the threshold shared by the results of its loss rate, repeat and slow count.
// Results read from an older JSON file without latencies keep their stored figures.
func shareLateThresholds(rs []*runResult) {
	type key struct {
		loss         float64
		repeat, slow int
	}
	low := map[key]float64{}
	for _, r := range rs {
		k := key{r.Loss, r.Repeat, r.Slow}
		if v, ok := low[k]; len(r.Lat) > 0 && (!ok || r.P50 < v) {
			low[k] = r.P50
		}
	}
	for _, r := range rs {
		if len(r.Lat) == 0 {
			continue
		}
		r.LateMs = lateThreshold(low[key{r.Loss, r.Repeat, r.Slow}], r.Delay)
		r.Late = lateShare(r.Lat, r.LateMs)
	}
}

// printLate prints the late shares per loss rate beside the goals: quicmq at most 1/3 of the
// ablation's and at most 2x the loss rate (goals for 1% and 2% loss), and the p99 at 0.5%
// loss at most 1/2 of the ablation's. Medians over repeats, ratios within a repeat.
func printLate(rs []*runResult, losses []float64, systems []string) {
	fmt.Println()
	head := []string{"loss"}
	for _, sys := range systems {
		head = append(head, sys+" late %")
	}
	head = append(head, "late quicmq/ablation (goal <= 0.33)", "late quicmq / loss rate (goal <= 2)", "p99 quicmq/ablation")
	fmt.Println("| " + strings.Join(head, " | ") + " |")
	fmt.Println("|" + strings.Repeat("---|", len(head)))
	for _, loss := range losses {
		cells := []string{fmt.Sprintf("%.1f%%", loss*100)}
		for _, sys := range systems {
			g := pick(rs, func(r *runResult) bool { return r.System == sys && r.Loss == loss && r.Slow == 0 })
			if len(g) == 0 {
				cells = append(cells, "-")
				continue
			}
			cells = append(cells, field(g, func(r *runResult) float64 { return 100 * r.Late }).String())
		}
		if s, ok := ratio(rs, loss, "quicmq", "ablation", func(r *runResult) float64 { return r.Late }); ok {
			cells = append(cells, s.String())
		} else {
			cells = append(cells, "-")
		}
		if g := pick(rs, func(r *runResult) bool { return r.System == "quicmq" && r.Loss == loss && r.Slow == 0 }); len(g) > 0 && loss > 0 {
			cells = append(cells, field(g, func(r *runResult) float64 { return r.Late / loss }).String())
		} else {
			cells = append(cells, "-")
		}
		if s, ok := ratio(rs, loss, "quicmq", "ablation", func(r *runResult) float64 { return r.P99 }); ok {
			cells = append(cells, s.String())
		} else {
			cells = append(cells, "-")
		}
		fmt.Println("| " + strings.Join(cells, " | ") + " |")
	}
	if len(rs) > 0 {
		fmt.Printf("\nlate: latency above the lowest median of the systems at that loss rate and repeat plus one round trip (2 x %v, at least %v); goals: late ratio at 1%% and 2%% loss, p99 ratio at 0.5%% (<= 0.5)\n", rs[0].Delay, lateMinRTT)
	}
}
