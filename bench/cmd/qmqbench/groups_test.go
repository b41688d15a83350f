package main

import (
	"testing"
	"time"
)

// A small backlog read by a group of 2 with a live publisher: every backlog record's ack is
// confirmed, none is acked twice, the figures are filled in; then the same with a third
// member that stops reading (a short ack-wait gives its records to the others). With -short
// QuicMQ only.
func TestGroupsSmoke(t *testing.T) {
	needHarness(t)
	systems := grpSystemNames
	if testing.Short() {
		systems = []string{"quicmq"}
	}
	for _, sys := range systems {
		for _, slow := range []bool{false, true} {
			name := sys
			if slow {
				name += "/slow"
			}
			t.Run(name, func(t *testing.T) {
				p := grpParams{System: sys, Members: 2, Slow: slow, Size: 64, Backlog: 3000, Rate: 200, Batch: 64,
					MaxAckPending: 1024, AckWait: 500 * time.Millisecond, MaxTime: time.Minute}
				var res grpResult
				if err := workerIn(sys, 3*time.Minute, func(string) []string { return p.args() }, &res, &workerSlot{}); err != nil {
					t.Fatal(err)
				}
				if res.TimedOut || res.Acked < p.Target() || res.Distinct < res.Acked || res.Redelivered != 0 || len(res.Notes) > 0 {
					t.Fatalf("acked %d of %d (distinct %d, redelivered %d), timed out %v, notes %v", res.Acked, p.Target(), res.Distinct, res.Redelivered, res.TimedOut, res.Notes)
				}
				if res.AckP50 <= 0 || res.AckP99 < res.AckP50 || res.ConfirmP50 <= 0 || res.Confirms < 1 || res.RSSStart <= 0 || res.RSSMax < res.RSSStart {
					t.Fatalf("figures not filled in: %+v", res)
				}
				if slow != (res.SlowHeld > 0) {
					t.Fatalf("slow %v, slow member held %d", slow, res.SlowHeld)
				}
				t.Logf("%s: %.0f records/s, ack p50 %.2f p99 %.1f ms, RSS %.0f/%.0f/%.0f MiB", name, res.Rate, res.AckP50, res.AckP99, res.RSSStart, res.RSSMax, res.RSSEnd)
			})
		}
	}
}
