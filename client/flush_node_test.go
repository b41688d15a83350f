package client_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/quicmq/quicmq/client"
)

// A pipelined burst, then Flush: every publish of the burst is answered when Flush returns,
// also while another goroutine keeps publishing.
func TestFlushAfterPipelinedBurst(t *testing.T) {
	n := newTestNode(t)
	c := dial(t, n)
	ctx := testCtx(t)

	// Another goroutine publishes until the test is done: Flush must not wait for it.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := c.PublishAsync(ctx, client.Message{Topic: "other", Payload: []byte("o")}); err != nil {
				t.Errorf("concurrent publish: %v", err)
				return
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	const burst = 3000
	futures := make([]*client.Future, burst)
	for i := range futures {
		f, err := c.PublishAsync(ctx, client.Message{Topic: "burst", Payload: fmt.Appendf(nil, "r%d", i)})
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		futures[i] = f
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	for i, f := range futures {
		select {
		case <-f.Done():
		default:
			t.Fatalf("publish %d of %d not answered when Flush returned", i, burst)
		}
		a, err := f.Wait(ctx)
		if err != nil || a.Offset != uint64(i) {
			t.Fatalf("publish %d: offset %d, %v", i, a.Offset, err)
		}
	}
}
