package node_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/node"
)

// BenchmarkFanout: one topic read by 100 subscriptions (on one connection, and spread over
// 10), records of 100 B published at a fixed rate (QUICMQ_BENCH_FANOUT_RATE records/s,
// default 2000; QUICMQ_BENCH_FANOUT_SUBS subscriptions, default 100) from another connection, with the shared tail (node.Config.TailRecords at
// its default) and without it (TailRecords -1: every subscription reads the log itself), in
// the same run. One op is one published record delivered to every subscription.
//
//	go test -run '^$' -bench Fanout -benchtime 3s -count 3 ./node
//
// It reports the process's CPU per delivery ("cpu-µs/delivery": node, publisher and the
// subscribers' SDK together, as everywhere in these benchmarks), the QUIC packets the node
// sent on the subscribers' connections per delivery ("pkts/delivery", quic-go's
// ConnectionStats), their mean size ("B/pkt") and,
// with the tail, the reads of the log into it per published record ("log-reads/record").
func BenchmarkFanout(b *testing.B) {
	subs := envInt(b, "QUICMQ_BENCH_FANOUT_SUBS", 100)
	for _, conns := range []int{1, 10} {
		for _, tail := range []bool{true, false} {
			name := "tail"
			if !tail {
				name = "no-tail"
			}
			b.Run(fmt.Sprintf("%s/subs=%d/conns=%d", name, subs, conns), func(b *testing.B) { benchFanout(b, subs, conns, tail) })
		}
	}
}

func benchFanout(b *testing.B, subs, conns int, tail bool) {
	rate := envInt(b, "QUICMQ_BENCH_FANOUT_RATE", 2000)
	n := startBenchNode(b, b.TempDir(), func(c *node.Config) {
		if !tail {
			c.TailRecords = -1
		}
	})
	pub := dialBench(b, n)
	const topic = "bench.fanout"
	payload := randomBytes(replaySize)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := pub.Publish(ctx, client.Message{Topic: topic, Payload: payload}); err != nil {
		b.Fatal(err)
	}
	cs := make([]*client.Conn, conns)
	for i := range cs {
		cs[i] = dialBench(b, n)
	}
	ss := make([]*client.Subscription, subs)
	for i := range ss {
		s, err := cs[i%conns].Subscribe(ctx, topic, client.SubscribeOptions{From: client.AtOffset(1)})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		ss[i] = s
	}
	errs := make(chan error, subs+1)
	var wg sync.WaitGroup
	b.ResetTimer()
	cpu := processCPU(b)
	pkts, pktBytes := n.PacketsSent()
	fills, _ := n.TailStats()
	start := time.Now()
	for _, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for want := uint64(1); want <= uint64(b.N); want++ {
				rec, err := s.Next(ctx)
				if err == nil && rec.Offset != want {
					err = fmt.Errorf("got offset %d, want %d", rec.Offset, want)
				}
				if err != nil {
					errs <- err
					cancel()
					return
				}
			}
		}()
	}
	// Paced: every 5 ms the records due by then, so the rate is fixed whatever the machine.
	const tick = 5 * time.Millisecond
	t := time.NewTicker(tick)
	var futures []*client.Future
	for sent := 0; sent < b.N; {
		due := min(b.N, int(float64(time.Since(start))/float64(time.Second)*float64(rate))+1)
		for ; sent < due; sent++ {
			f, err := pub.PublishAsync(ctx, client.Message{Topic: topic, Payload: payload})
			if err != nil {
				b.Fatal(err)
			}
			futures = append(futures, f)
		}
		if sent < b.N {
			<-t.C
		}
	}
	t.Stop()
	for _, f := range futures {
		if _, err := f.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	deliveries := float64(b.N) * float64(subs)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
	reportCPU(b, cpu, deliveries, "delivery")
	p, pb := n.PacketsSent()
	b.ReportMetric(float64(p-pkts)/deliveries, "pkts/delivery")
	b.ReportMetric(float64(pb-pktBytes)/float64(max(p-pkts, 1)), "B/pkt")
	if tail {
		f, _ := n.TailStats()
		b.ReportMetric(float64(f-fills)/float64(b.N), "log-reads/record")
	}
}
