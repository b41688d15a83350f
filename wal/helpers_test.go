package wal

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
)

// testLogger writes the log's messages to t.Log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// newTestLog opens a log on disk in t.TempDir(), closed by t.Cleanup, and
// checks that Close left no goroutine of the package behind.
func newTestLog(t testing.TB, opts Options) (*Log, string) {
	t.Helper()
	dir := t.TempDir()
	return openTestLog(t, dir, opts), dir
}

func openTestLog(t testing.TB, dir string, opts Options) *Log {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	if opts.RetentionInterval == 0 {
		opts.RetentionInterval = -1
	}
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		checkNoGoroutines(t)
	})
	return l
}

// checkNoGoroutines fails if a goroutine started by this package's Log is
// still running (a goleak equivalent without the dependency).
func checkNoGoroutines(t testing.TB) {
	t.Helper()
	testlog.WaitForErr(t, 5*time.Second, "the log's goroutines to end after Close", func() error {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		var leaked []string
		for _, g := range strings.Split(stacks, "\n\n") {
			for _, fn := range []string{"wal.(*Log).commitLoop", "wal.(*Log).completeLoop", "wal.(*Log).retentionLoop"} {
				if strings.Contains(g, fn) {
					leaked = append(leaked, g)
				}
			}
		}
		if len(leaked) == 0 {
			return nil
		}
		return fmt.Errorf("left:\n%s", strings.Join(leaked, "\n\n"))
	})
}

// fakeClock is a settable clock for Options.Now.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func testPayload(topic string, i int) []byte {
	return []byte(fmt.Sprintf("%s/%d/%s", topic, i, strings.Repeat("x", i%50)))
}

// mustAppend appends n records to topic, each with testPayload(topic,
// start+i), and checks the offsets.
func mustAppend(t testing.TB, l *Log, topic string, start, n int) AppendResult {
	t.Helper()
	recs := make([]Record, n)
	for i := range recs {
		recs[i].Payload = testPayload(topic, start+i)
	}
	res := l.Append(context.Background(), AppendRequest{Topic: topic, Records: recs})
	if res.Err != nil {
		t.Fatalf("Append %q: %v", topic, res.Err)
	}
	if res.First != uint64(start) || res.Count != n {
		t.Fatalf("Append %q: got First %d Count %d, want %d %d", topic, res.First, res.Count, start, n)
	}
	return res
}

// mustReadAll reads [from, HWM) of topic in chunks.
func mustReadAll(t testing.TB, l *Log, topic string, from uint64) []Record {
	t.Helper()
	var out []Record
	for {
		recs, err := l.Read(topic, from, 100, 0)
		if err != nil {
			t.Fatalf("Read %q at %d: %v", topic, from, err)
		}
		if len(recs) == 0 {
			return out
		}
		out = append(out, recs...)
		from = recs[len(recs)-1].Offset + 1
	}
}

// mustSetRetention stores topic's own retention.
func mustSetRetention(t testing.TB, l *Log, topic string, r Retention) {
	t.Helper()
	if err := l.SetRetention(context.Background(), topic, r); err != nil {
		t.Fatalf("SetRetention %q: %v", topic, err)
	}
}
