package client

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
)

// Pipelined publishes over many topics go to a node of version 5 as PUBLISH_MULTI frames
// that each carry several topics, and every future gets its own answer; to a node of
// version 4 (an older build, which would end the stream at PUBLISH_MULTI) the client sends
// no PUBLISH_MULTI, one PUBLISH_BATCH or PUBLISH per topic change.
func TestPublishMultiOnlyToVersion5(t *testing.T) {
	for _, c := range []struct {
		name       string
		maxVersion uint64
		multi      bool
	}{{"version-5", 0, true}, {"version-4", 4, false}} {
		t.Run(c.name, func(t *testing.T) {
			const n, topics = 300, 10
			var mu sync.Mutex
			types := map[wire.Type]int{}
			widest := 0 // topics of the widest PUBLISH_MULTI
			f := newFakeNode(t, func(s *quic.Stream, r *wire.Reader, first wire.Frame) {
				var seqs []uint64
				for fr := first; ; {
					mu.Lock()
					types[fr.Type()]++
					if m, ok := fr.(*wire.PublishMulti); ok {
						seen := map[string]bool{}
						for _, p := range m.Publishes {
							seen[p.Topic] = true
						}
						widest = max(widest, len(seen))
					}
					mu.Unlock()
					seqs = append(seqs, publishSeqs(fr)...)
					if len(seqs) >= n {
						break
					}
					var err error
					if fr, err = r.Read(); err != nil {
						return
					}
				}
				w := wire.NewWriter(s)
				for _, seq := range seqs {
					w.Write(&wire.PublishAck{Seq: seq, Offset: seq - 1}) // publish k at offset k
				}
				w.Flush()
				io.Copy(io.Discard, s)
			})
			f.maxVersion.Store(c.maxVersion)
			conn := dialFake(t, f)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var fs []*Future
			for i := range n {
				fut, err := conn.PublishAsync(ctx, Message{Topic: fmt.Sprintf("t%d", i%topics), Payload: []byte("x")})
				if err != nil {
					t.Fatal(err)
				}
				fs = append(fs, fut)
			}
			for k, fut := range fs {
				if a, err := fut.Wait(ctx); err != nil || a.Offset != uint64(k) || a.Topic != fmt.Sprintf("t%d", k%topics) {
					t.Fatalf("publish %d: %+v, %v", k, a, err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			t.Logf("frames %v, widest PUBLISH_MULTI %d topics", types, widest)
			if c.multi && widest < 2 {
				t.Fatalf("no PUBLISH_MULTI carried several topics: frames %v", types)
			}
			if !c.multi && types[wire.TypePublishMulti] > 0 {
				t.Fatalf("%d PUBLISH_MULTI sent to a node of version %d", types[wire.TypePublishMulti], c.maxVersion)
			}
		})
	}
}
