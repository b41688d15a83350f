package replica

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quicmq/quicmq/wal"
)

// BenchmarkProposePipelined is the node's replicated publish path without
// QUIC: three drivers on WalSM (real files, fsync) in one process, entries
// of 32 records of 1 KiB (what a node packs per entry under load), kept
// `inflight` entries outstanding through ProposeAsync as a node's
// publishers do. One op is one record; payloads are random (incompressible).
// It reports records/s, records per leader fsync, the process CPU per record
// (all three nodes), the bytes the leader's Pebble wrote to sstables per
// record and the bytes its batches carried per record, for the driver as it was (each proposal handed to Run, every
// entry read back from Pebble, log never compacted), with the proposal
// queue, with the entry cache too and with log compaction too (what a node runs; and
// with proposals completed after the round's fsync, as before they completed early); beside them
// a group of one replica (without and with compaction) and wal's own
// synced append (R1) with as many records in flight.
func BenchmarkProposePipelined(b *testing.B) {
	variants := []struct {
		name     string
		replicas int
		tune     func(*Config)
	}{
		{"before", 3, func(c *Config) { c.handOverProposals, c.noEntryCache = true, true }},
		{"queue", 3, func(c *Config) { c.noEntryCache = true }},
		{"cache", 3, func(c *Config) {}},
		{"cache+compact", 3, func(c *Config) { c.LogCompaction = true }},
		{"cache+compact+ack-after-sync", 3, func(c *Config) { c.LogCompaction, c.ackAfterSync = true, true }},
		{"one-replica", 1, func(c *Config) {}},
		{"one-replica+compact", 1, func(c *Config) { c.LogCompaction = true }},
	}
	recs := make([]wal.Record, 32)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range recs {
		recs[i].Payload = make([]byte, 1024)
		for j := range recs[i].Payload {
			recs[i].Payload[j] = byte(rng.Uint32()) // incompressible, as payloads mostly are
		}
	}
	for _, inflight := range []int{1, 32, 512} {
		for _, v := range variants {
			b.Run(fmt.Sprintf("inflight=%d/%s", inflight, v.name), func(b *testing.B) {
				benchPipelined(b, recs, inflight, v.replicas, v.tune)
			})
		}
		b.Run(fmt.Sprintf("inflight=%d/wal-r1", inflight), func(b *testing.B) {
			benchWalR1(b, recs, inflight)
		})
	}
}

// benchWalR1 is the baseline of R1: the same appends straight into a
// wal.Log (its own group commit, synced) with the same number in flight.
func benchWalR1(b *testing.B, recs []wal.Record, inflight int) {
	l, err := wal.Open(b.TempDir(), wal.Options{RetentionInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	runPipelined(b, l, len(recs), inflight, func(done func(error)) {
		l.AppendAsync(wal.AppendRequest{Topic: "bench", Records: recs}, func(r wal.AppendResult) { done(r.Err) })
	})
}

// runPipelined times b.N records, submitted perOp at a time with inflight
// submissions outstanding, and reports records/s, the process CPU, its page faults
// (memory new to the process: on this project's VMs each costs about 20 µs) and the
// sstable bytes l's Pebble wrote per record.
func runPipelined(b *testing.B, l *wal.Log, perOp, inflight int, submit func(done func(error))) {
	cpu0, faults0 := cpuTime(), minorFaults()
	written0 := tableBytesWritten(l)
	walIn0 := l.DB().Metrics().WAL.BytesIn
	b.SetBytes(1024)
	b.ResetTimer()
	sem := make(chan struct{}, inflight)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ferr error
	)
	for n := 0; n < b.N; n += perOp {
		sem <- struct{}{}
		wg.Add(1)
		submit(func(err error) {
			if err != nil {
				mu.Lock()
				ferr = err
				mu.Unlock()
			}
			<-sem
			wg.Done()
		})
	}
	wg.Wait()
	b.StopTimer()
	if ferr != nil {
		b.Fatal(ferr)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/record")
	b.ReportMetric(float64(minorFaults()-faults0)/float64(b.N), "faults/record")
	b.ReportMetric(float64(tableBytesWritten(l)-written0)/float64(b.N), "leader-sst-B/record")
	// What the leader's batches carried (Pebble's WAL, and so its memtables): the raft log's
	// copy of a record and wal's, besides keys and state.
	b.ReportMetric(float64(l.DB().Metrics().WAL.BytesIn-walIn0)/float64(b.N), "leader-batch-B/record")
}

// tableBytesWritten is what Pebble has written to sstables so far
// (flushes and compactions, every level): the write amplification.
func tableBytesWritten(l *wal.Log) uint64 {
	var n uint64
	for _, lm := range l.DB().Metrics().Levels {
		n += lm.TableBytesFlushed + lm.TableBytesCompacted + lm.BlobBytesFlushed + lm.BlobBytesCompacted
	}
	return n
}

func benchPipelined(b *testing.B, recs []wal.Record, inflight, replicas int, tune func(*Config)) {
	const topic = "bench"
	g := TopicGroup(topic)
	net := &testNet{drivers: map[uint64]*Driver{}, down: map[uint64]bool{}}
	var peers []uint64
	for i := range replicas {
		peers = append(peers, uint64(i+1))
	}
	var rs []*walReplica
	for _, id := range peers {
		rs = append(rs, startWalReplicaWith(b, net, id, b.TempDir(), []uint64{g}, peers, func(c *Config) {
			c.TickInterval = 100 * time.Millisecond // the node's: no election under load
			tune(c)
		}))
	}
	ctx := context.Background()
	if replicas > 1 {
		if err := rs[0].d.Campaign(ctx, g); err != nil {
			b.Fatal(err)
		}
	}
	if l := leaderOf(b, rs, g); l != rs[0] {
		b.Skipf("node %d won the group", l.id)
	}
	data, err := EncodeEntry(nil, &WalEntry{Kind: EntryAppend, Topic: topic, Records: recs})
	if err != nil {
		b.Fatal(err)
	}
	before, err := rs[0].d.Stats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	runPipelined(b, rs[0].log, len(recs), inflight, func(done func(error)) {
		rs[0].d.ProposeAsync(ctx, g, data, func(_ Result, err error) {
			if errors.Is(err, ErrDropped) {
				err = nil
			}
			done(err)
		})
	})
	after, err := rs[0].d.Stats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if syncs := after.SyncCommits - before.SyncCommits; syncs > 0 {
		b.ReportMetric(float64(b.N)/float64(syncs), "records/fsync")
	}
	b.ReportMetric(float64(after.Compactions-before.Compactions), "compactions")
}

// minorFaults is the process's page faults so far that read nothing from disk: first
// touches of memory new to it.
func minorFaults() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Minflt
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkProposeBigEntries is BenchmarkProposePipelined's "cache+compact" with entries
// as a leader packs them under 16 publishers on one topic (about 500 records of 1 KiB
// each): compacting every LogCompactEvery (64) entries only, a group's raft log outlived
// Pebble's 64 MiB memtable and the raft copy of records was flushed to disk, then
// compacted away (leader-sst-B/record); by bytes (LogCompactBytes) it dies in the
// memtable.
func BenchmarkProposeBigEntries(b *testing.B) {
	recs := make([]wal.Record, 512)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range recs {
		recs[i].Payload = make([]byte, 1024)
		for j := range recs[i].Payload {
			recs[i].Payload[j] = byte(rng.Uint32())
		}
	}
	for _, v := range []struct {
		name  string
		bytes uint64
	}{{"every-64-entries", 1 << 62}, {"every-4MiB", 0}} {
		b.Run(v.name, func(b *testing.B) {
			benchPipelined(b, recs, 8, 3, func(c *Config) { c.LogCompaction, c.LogCompactBytes = true, v.bytes })
		})
	}
}
