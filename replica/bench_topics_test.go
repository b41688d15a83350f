package replica

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/quicmq/quicmq/wal"
)

// BenchmarkProposeTopics is issue 29's many-topic publish path without QUIC or the node:
// three drivers on WalSM (real files, fsync) with every topic in one group and batching on,
// a node's publishers' one-record proposals over `topics` topics taken in turn (what a client
// publishing over 1,000 topics makes) against 32-record proposals to one topic, `inflight`
// records outstanding either way. One op is one record. Besides records/s and the process's
// CPU per record it reports heap allocations per record (steadier than CPU on a loaded
// machine): the cost of a proposal that is not amortised over a batch of records.
func BenchmarkProposeTopics(b *testing.B) {
	payload := make([]byte, 1024)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range payload {
		payload[i] = byte(rng.Uint32())
	}
	for _, c := range []struct{ topics, perProposal int }{{1, 32}, {1000, 1}} {
		b.Run(fmt.Sprintf("topics=%d/records=%d", c.topics, c.perProposal), func(b *testing.B) {
			benchTopics(b, payload, c.topics, c.perProposal, 512)
		})
	}
}

func benchTopics(b *testing.B, payload []byte, topics, perProposal, inflight int) {
	const g = 7
	net := &testNet{drivers: map[uint64]*Driver{}, down: map[uint64]bool{}}
	peers := []uint64{1, 2, 3}
	var rs []*walReplica
	for _, id := range peers {
		r := startWalReplicaSM(b, net, id, b.TempDir(), []uint64{g}, peers, func(string) uint64 { return g }, func(c *Config) {
			c.TickInterval, c.LogCompaction = 100*time.Millisecond, true // the node's: no election under load
		})
		r.d.SetBatching(true)
		rs = append(rs, r)
	}
	ctx := context.Background()
	if err := rs[0].d.Campaign(ctx, g); err != nil {
		b.Fatal(err)
	}
	if l := leaderOf(b, rs, g); l != rs[0] {
		b.Skipf("node %d won the group", l.id)
	}
	recs := make([]wal.Record, perProposal)
	for i := range recs {
		recs[i].Payload = payload
	}
	datas := make([][]byte, topics)
	for i := range datas {
		var err error
		datas[i], err = EncodeEntry(nil, &WalEntry{Kind: EntryAppend, Topic: fmt.Sprintf("bench.t%05d", i), Records: recs})
		if err != nil {
			b.Fatal(err)
		}
	}
	// Every topic once before timing: the topics' first appends (binding) are not the cost here.
	for _, d := range datas {
		if _, err := rs[0].d.Propose(ctx, g, d); err != nil {
			b.Fatal(err)
		}
	}
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	next := 0
	runPipelined(b, rs[0].log, perProposal, max(inflight/perProposal, 1), func(done func(error)) {
		d := datas[next]
		next = (next + 1) % len(datas)
		rs[0].d.ProposeAsync(ctx, g, d, func(_ Result, err error) {
			if errors.Is(err, ErrDropped) {
				err = nil
			}
			done(err)
		})
	})
	runtime.ReadMemStats(&ms1)
	// The whole process: three replicas, so about what a region's three nodes allocate.
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(b.N), "allocs/record")
}
