package replica

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/quicmq/quicmq/wal"
)

// BenchmarkPropose measures quorum-durable proposals through three drivers
// in one process (in-process transport, Pebble on real files with fsync),
// with 1 and 64 concurrent proposers of 1 KiB, over 1 and 8 groups led by
// one node. It reports proposals/s and the proposals per synced batch of
// the leader (group commit).
func BenchmarkPropose(b *testing.B) {
	payload := make([]byte, 1024)
	for _, groups := range []int{1, 8} {
		for _, par := range []int{1, 64} {
			b.Run(fmt.Sprintf("groups=%d/proposers=%d", groups, par), func(b *testing.B) {
				var gs []uint64
				for g := range groups {
					gs = append(gs, uint64(g+1))
				}
				rs, _ := startRegionOn(b, 3, gs, func() vfs.FS { return vfs.Default })
				ctx := context.Background()
				for _, g := range gs {
					if err := rs[0].d.Campaign(ctx, g); err != nil {
						b.Fatal(err)
					}
				}
				for _, g := range gs {
					if l := leaderOf(b, rs, g); l != rs[0] {
						b.Skipf("node %d won group %d", l.id, g)
					}
				}
				before, err := rs[0].d.Stats(ctx)
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(len(payload)))
				b.SetParallelism((par + 1) / 2) // GOMAXPROCS=2 here: 2 x this goroutines
				if par == 1 {
					b.SetParallelism(1)
				}
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := 0
					for pb.Next() {
						i++
						g := gs[i%len(gs)]
						if _, err := rs[0].d.Propose(ctx, g, payload); err != nil && !errors.Is(err, ErrDropped) {
							b.Error(err)
							return
						}
					}
				})
				b.StopTimer()
				after, err := rs[0].d.Stats(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if syncs := after.SyncCommits - before.SyncCommits; syncs > 0 {
					b.ReportMetric(float64(b.N)/float64(syncs), "proposals/fsync")
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "proposals/s")
			})
		}
	}
}

// BenchmarkProposeWal is BenchmarkPropose's one-group case through WalSM:
// each proposal is an append entry of one 1 KiB record to a replicated
// topic, applied into wal's layout (run both in one invocation to compare).
func BenchmarkProposeWal(b *testing.B) {
	rec := []wal.Record{{Payload: make([]byte, 1024)}}
	for _, par := range []int{1, 64} {
		b.Run(fmt.Sprintf("proposers=%d", par), func(b *testing.B) {
			const topic = "bench"
			g := TopicGroup(topic)
			rs, _, _ := startWalRegion(b, []uint64{g})
			ctx := context.Background()
			if err := rs[0].d.Campaign(ctx, g); err != nil {
				b.Fatal(err)
			}
			if l := leaderOf(b, rs, g); l != rs[0] {
				b.Skipf("node %d won the group", l.id)
			}
			b.SetBytes(1024)
			b.SetParallelism(max(par/2, 1))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					res := rs[0].sm.Propose(ctx, rs[0].d, &WalEntry{Kind: EntryAppend, Topic: topic, Records: rec})
					if res.Err != nil && !errors.Is(res.Err, ErrDropped) {
						b.Error(res.Err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "proposals/s")
		})
	}
}
