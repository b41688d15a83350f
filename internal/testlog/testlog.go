// Package testlog gives tests a logger, seeded random sources (Rand) and heap readings
// (ScanHeap). The logger writes to t.Log when QUICMQ_TEST_LOG is set and nowhere otherwise,
// and it stops writing when the test ends, so that a goroutine finishing late cannot log after
// its test (which the testing package reports as a failure).
package testlog

import (
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
)

// New returns the logger for t.
func New(t testing.TB) *slog.Logger {
	if os.Getenv("QUICMQ_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	w := &writer{t: t}
	t.Cleanup(func() { w.done.Store(true) })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type writer struct {
	t    testing.TB
	done atomic.Bool
}

func (w *writer) Write(p []byte) (int, error) {
	if !w.done.Load() {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}
