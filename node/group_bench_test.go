package node

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
)

// BenchmarkGroupDrain: a group of 1, 4 and 16 members (each on its own connection) reads and
// acknowledges (each record, stored synced per run of ACKs) a backlog of b.N records of one
// topic; reported as records/s (consume and ack only; the backlog is published first).
// "4+stalled" is 4 members and a fifth that takes its records and stops reading: its records
// reach the others after the group's ack-wait (200 ms in every case here).
func BenchmarkGroupDrain(b *testing.B) {
	for _, bc := range []struct {
		name             string
		members, stalled int
	}{{"1", 1, 0}, {"4", 4, 0}, {"16", 16, 0}, {"4+stalled", 4, 1}} {
		members := bc.members
		b.Run(bc.name, func(b *testing.B) {
			n := newTestNode(b)
			c := dialNode(b, n, client.Options{})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			payload := make([]byte, 100)
			for i := 0; i < b.N; i++ {
				if _, err := c.PublishAsync(ctx, client.Message{Topic: "bench", Payload: payload}); err != nil {
					b.Fatal(err)
				}
			}
			if err := c.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			var got atomic.Int64
			done := make(chan struct{})
			var once sync.Once
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			opts := client.SubscribeOptions{Group: "g", AckWait: 200 * time.Millisecond}
			for range bc.stalled {
				sub, err := dialNode(b, n, client.Options{}).Subscribe(ctx, "bench", opts)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := sub.Next(ctx); err != nil { // then it reads no more
					b.Fatal(err)
				}
			}
			for range members {
				sub, err := dialNode(b, n, client.Options{}).Subscribe(ctx, "bench", opts)
				if err != nil {
					b.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer sub.Close()
					for {
						select {
						case <-done:
							return
						default:
						}
						r, err := sub.Next(ctx)
						if err != nil {
							return
						}
						sub.Ack(r)
						if got.Add(1) >= int64(b.N) {
							once.Do(func() { close(done) })
						}
					}
				}()
			}
			<-done
			el := time.Since(start)
			b.StopTimer()
			cancel()
			wg.Wait()
			b.ReportMetric(float64(b.N)/el.Seconds(), "records/s")
		})
	}
}
