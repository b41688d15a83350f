package node

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/node/tail"
	"github.com/quicmq/quicmq/wal"
)

// The shared tail (node/tail) through the node: what its subscriptions get from it, and I3.

// Many subscriptions on one topic, through the node: caught up from the start, joining
// mid-stream at the latest offset, and replaying from the earliest while records keep
// coming (they lag, read the log with their own cursor, and move to the tail). Every one
// gets every record from its start exactly once, in order, and the tail served most of them.
func TestTailManySubscriptions(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.TailRecords = 64 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := dialNode(t, n, client.Options{})
	const topic, total = "tail.many", 2000
	payload := func(i int) []byte { return []byte(fmt.Sprintf("r%d", i)) }
	if _, err := c.Publish(ctx, client.Message{Topic: topic, Payload: payload(0)}); err != nil {
		t.Fatal(err)
	}
	type result struct {
		name string
		err  error
	}
	results := make(chan result, 64)
	var wg sync.WaitGroup
	subscribe := func(name string, from client.Start, start uint64) {
		conn := dialNode(t, n, client.Options{})
		sub, err := conn.Subscribe(ctx, topic, client.SubscribeOptions{From: from})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer sub.Close()
			want := start
			for want < total {
				rec, err := sub.Next(ctx)
				if err != nil {
					results <- result{name, fmt.Errorf("at %d: %w", want, err)}
					return
				}
				if rec.Offset != want || string(rec.Payload) != string(payload(int(rec.Offset))) {
					results <- result{name, fmt.Errorf("got offset %d %q, want offset %d", rec.Offset, rec.Payload, want)}
					return
				}
				want++
			}
			results <- result{name, nil}
		}()
	}
	for i := range 10 {
		subscribe(fmt.Sprintf("caught-up-%d", i), client.AtOffset(1), 1)
	}
	for i := 1; i < total; i++ {
		if _, err := c.PublishAsync(ctx, client.Message{Topic: topic, Payload: payload(i)}); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 { // a paced publisher: batches of 50
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		switch i {
		case 500, 1000, 1500:
			subscribe(fmt.Sprintf("earliest-at-%d", i), client.Earliest, 0)
			subscribe(fmt.Sprintf("latest-at-%d", i), client.Latest, uint64(i+1)) // all before it are durable
		}
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(results)
	for r := range results {
		if r.err != nil {
			t.Errorf("%s: %v", r.name, r.err)
		}
	}
	// The 16 subscriptions get about 29,000 records; the tail must have served most of them.
	if got := n.tails.Stats().Served; got < 15000 {
		t.Fatalf("the shared tail served %d records, want most of about 29,000", got)
	}
	t.Logf("tail: %d fills, %d records served", n.tails.Stats().Fills, n.tails.Stats().Served)
}

// gateFS holds every sync of Pebble's WAL files while it is closed, so a commit is applied
// (visible to Pebble's readers) but not durable, and the log's high-watermark stays behind it.
type gateFS struct {
	vfs.FS
	mu      sync.Mutex
	closed  bool
	open    chan struct{} // closed when the gate opens
	blocked chan struct{} // gets a value when a sync waits at the gate
}

func newGateFS() *gateFS { return &gateFS{FS: vfs.Default, blocked: make(chan struct{}, 16)} }

func (g *gateFS) close() {
	g.mu.Lock()
	g.closed, g.open = true, make(chan struct{})
	g.mu.Unlock()
}

func (g *gateFS) release() {
	g.mu.Lock()
	if g.closed {
		g.closed = false
		close(g.open)
	}
	g.mu.Unlock()
}

func (g *gateFS) wait() {
	g.mu.Lock()
	closed, open := g.closed, g.open
	g.mu.Unlock()
	if closed {
		select {
		case g.blocked <- struct{}{}:
		default:
		}
		<-open
	}
}

func (g *gateFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return gateFile{File: f, g: g}, nil
}

func (g *gateFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := g.FS.Create(name, c)
	return g.wrap(name, f, err)
}

func (g *gateFS) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := g.FS.ReuseForWrite(old, name, c)
	return g.wrap(name, f, err)
}

type gateFile struct {
	vfs.File
	g *gateFS
}

func (f gateFile) Sync() error     { f.g.wait(); return f.File.Sync() }
func (f gateFile) SyncData() error { f.g.wait(); return f.File.SyncData() }
func (f gateFile) SyncTo(n int64) (bool, error) {
	f.g.wait()
	return f.File.SyncTo(n)
}

// I3: a record applied to Pebble but not yet synced is in neither the tail nor a
// subscription; once its sync returns, both have it.
func TestTailNeverPastHighWatermark(t *testing.T) {
	gate := newGateFS()
	n := newTestNode(t, func(c *Config) { c.FS = gate })
	defer gate.release() // before the node's cleanup stops it
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dialNode(t, n, client.Options{})
	const topic = "tail.hwm"
	if _, err := c.Publish(ctx, client.Message{Topic: topic, Payload: []byte("r0")}); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe(ctx, topic, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if rec, err := sub.Next(ctx); err != nil || rec.Offset != 0 {
		t.Fatalf("first record: %v %v", rec.Offset, err)
	}
	tl := n.tails.Acquire(topic)
	defer n.tails.Release(tl)

	gate.close()
	fut, err := c.PublishAsync(ctx, client.Message{Topic: topic, Payload: []byte("r1")})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-gate.blocked:
	case <-ctx.Done():
		t.Fatal("no WAL sync reached the gate")
	}
	// The commit is applied (or about to be) while its sync waits: however often it is asked,
	// the tail has nothing past the high-watermark, which has not moved.
	for range 1000 {
		if offs, _, ok := tailRead(t, tl, 1, 100, 1<<20); !ok || len(offs) != 0 {
			t.Fatalf("the tail served %v (ok=%v) before the record's sync returned", offs, ok)
		}
		runtime.Gosched()
	}
	if _, hwm, _ := n.wal.Bounds(topic); hwm != 1 {
		t.Fatalf("high-watermark %d before the sync returned, want 1", hwm)
	}
	gate.release()
	if _, err := fut.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if rec, err := sub.Next(ctx); err != nil || rec.Offset != 1 || string(rec.Payload) != "r1" {
		t.Fatalf("after the sync: offset %d %q %v, want offset 1", rec.Offset, rec.Payload, err)
	}
	offs, pays, ok := tailRead(t, tl, 1, 100, 1<<20)
	if !ok || len(offs) != 1 || string(pays[0]) != "r1" {
		t.Fatalf("the tail after the sync: %v %q ok=%v, want offset 1", offs, pays, ok)
	}
}

// tailRead reads from the tail and returns the offsets and payloads it got (copied).
func tailRead(t *testing.T, tl *tail.Topic, from uint64, maxRecords, maxBytes int) ([]uint64, [][]byte, bool) {
	t.Helper()
	var offs []uint64
	var pays [][]byte
	got, ok, err := tl.Read(from, maxRecords, maxBytes, func(r *wal.Record) {
		offs = append(offs, r.Offset)
		pays = append(pays, r.Payload)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got != len(offs) {
		t.Fatalf("read reported %d records, gave %d", got, len(offs))
	}
	return offs, pays, ok
}
