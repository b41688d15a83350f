package replica

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
)

// TestProposeAsyncDataReusableAfterDone holds ProposeAsync to its word that the driver
// reads a proposal's data only until done: the caller (node/replpropose.go) encodes
// publishes into pooled buffers and gives each back in done. Here every buffer is scribbled
// over and handed to the next proposal as soon as done runs, with many in flight, and every
// replica must still hold exactly the bytes proposed.
func TestProposeAsyncDataReusableAfterDone(t *testing.T) {
	const g, n, inflight = 1, 300, 32
	rs, _ := startRegion(t, 3, []uint64{g})
	leader := leaderOf(t, rs, g)
	var (
		mu   sync.Mutex
		free [][]byte
		errs []error
		wg   sync.WaitGroup
	)
	sem := make(chan struct{}, inflight)
	payload := func(i int) []byte {
		return fmt.Appendf(nil, "proposal %04d %s", i, bytes.Repeat([]byte{byte('a' + i%26)}, 200+i%300))
	}
	for i := range n {
		sem <- struct{}{}
		mu.Lock()
		var buf []byte
		if k := len(free); k > 0 {
			buf, free = free[k-1][:0], free[:k-1]
		}
		mu.Unlock()
		data := append(buf, payload(i)...)
		wg.Add(1)
		leader.d.ProposeAsync(context.Background(), g, data, func(_ Result, err error) {
			for j := range data {
				data[j] = 'X'
			}
			mu.Lock()
			if err != nil {
				errs = append(errs, fmt.Errorf("proposal %d: %w", i, err))
			}
			free = append(free, data)
			mu.Unlock()
			<-sem
			wg.Done()
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d proposals failed, the first: %v", len(errs), errs[0])
	}
	for _, r := range rs {
		testlog.WaitFor(t, 20*time.Second, fmt.Sprintf("node %d to apply %d entries", r.id, n), func() bool { next, _ := r.sm.Next(g); return next == n })
		recs, err := r.sm.Read(g, 0, n)
		if err != nil || len(recs) != n {
			t.Fatalf("node %d: read %d records: %v", r.id, len(recs), err)
		}
		for i, rec := range recs {
			if want := payload(i); !bytes.Equal(rec.Data, want) {
				t.Fatalf("node %d offset %d: %.40q..., proposed %.40q...: the driver read a proposal's buffer after its done", r.id, i, rec.Data, want)
			}
		}
	}
}
