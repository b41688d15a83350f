package node_test

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

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
// "quic-only" is the transport alone under the same fan-out (benchFanoutFloor).
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
		b.Run(fmt.Sprintf("quic-only/subs=%d/conns=%d", subs, conns), func(b *testing.B) { benchFanoutFloor(b, subs, conns) })
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

// fanoutFrameSize is what one delivery of BenchmarkFanout's 100-byte records puts on a
// stream: a RECORD frame's bytes (header, offset, time, origin, payload), as measured there
// (B/pkt x pkts/delivery, less QUIC's own ~15 bytes per delivery).
const fanoutFrameSize = 125

// benchFanoutFloor measures the transport alone under BenchmarkFanout: subs QUIC streams over
// conns connections on loopback (TLS 1.3, the node's windows), the server writing
// fanoutFrameSize bytes to every stream per record at the same fixed rate, one goroutine
// per connection walking its streams (cheaper than a goroutine per subscription), a reader
// goroutine per stream at the client as the SDK has. No log, no tail, no framing: quic-go,
// crypto/tls, the kernel's UDP path and the Go runtime at both ends. Its cpu-µs/delivery
// bounds the fan-out any broker gives every subscription a QUIC stream of its own on these
// cores: "bound/deliveries/s" = GOMAXPROCS x 1e6 / (cpu-µs/delivery), the rate at which the
// cores would be busy with the transport alone.
func benchFanoutFloor(b *testing.B, subs, conns int) {
	rate := envInt(b, "QUICMQ_BENCH_FANOUT_RATE", 2000)
	if conns > 255 {
		b.Fatalf("%d connections: the floor names a stream's connection in one byte", conns)
	}
	var mu sync.Mutex
	byConn := make([][]*quic.Stream, conns) // the server's streams, by the client's connection
	accepted := 0
	all := make(chan struct{})
	cs := startFloorConns(b, conns, func(s *quic.Stream) {
		var hello [1]byte // the index of the stream's connection
		if _, err := io.ReadFull(s, hello[:]); err != nil || int(hello[0]) >= conns {
			return
		}
		mu.Lock()
		byConn[hello[0]] = append(byConn[hello[0]], s)
		if accepted++; accepted == subs {
			close(all)
		}
		mu.Unlock()
		<-s.Context().Done() // keep the stream until the connection ends
	})
	readers := make([]*quic.Stream, subs)
	for i := range readers {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s, err := cs[i%conns].OpenStreamSync(ctx)
		cancel()
		if err == nil {
			_, err = s.Write([]byte{byte(i % conns)})
		}
		if err != nil {
			b.Fatal(err)
		}
		readers[i] = s
	}
	<-all
	frame := randomBytes(fanoutFrameSize)
	errs := make(chan error, subs+conns)
	var wg sync.WaitGroup
	b.ResetTimer()
	cpu := processCPU(b)
	start := time.Now()
	for _, s := range readers {
		wg.Go(func() {
			buf := make([]byte, fanoutFrameSize)
			for range b.N {
				if _, err := io.ReadFull(s, buf); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	// Paced as benchFanout: every 5 ms the records due by then, to every stream.
	due := make([]chan int, conns)
	for i, streams := range byConn {
		due[i] = make(chan int, 1)
		wg.Go(func() {
			for n := range due[i] {
				for range n {
					for _, s := range streams {
						if _, err := s.Write(frame); err != nil {
							errs <- err
							return
						}
					}
				}
			}
		})
	}
	const tick = 5 * time.Millisecond
	t := time.NewTicker(tick)
	for sent := 0; sent < b.N; {
		n := min(b.N, int(float64(time.Since(start))/float64(time.Second)*float64(rate))+1) - sent
		if n > 0 {
			for _, ch := range due {
				ch <- n
			}
			sent += n
		}
		if sent < b.N {
			<-t.C
		}
	}
	t.Stop()
	for _, ch := range due {
		close(ch)
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
	floorCPU := float64((processCPU(b) - cpu).Microseconds()) / deliveries
	b.ReportMetric(floorCPU, "cpu-µs/delivery")
	b.ReportMetric(float64(runtime.GOMAXPROCS(0))*1e6/floorCPU, "bound/deliveries/s")
}
