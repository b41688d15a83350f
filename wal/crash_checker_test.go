package wal

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// failRecorder stands in for *testing.T in a crash session that is expected to
// fail: it keeps the checker's complaints instead of failing the test.
type failRecorder struct {
	ctx context.Context
	mu  sync.Mutex
	msg []string
}

func (r *failRecorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msg = append(r.msg, fmt.Sprintf(format, args...))
}

func (r *failRecorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msg) > 0
}

func (r *failRecorder) Context() context.Context { return r.ctx }

// TestCrashCheckerCatchesAckBeforeSync runs the power-loss campaign's checker
// (TestCrashRecovery's sessions and verification, unchanged) against a
// deliberately broken log that acknowledges each batch without an fsync: the
// checker must report acknowledged records or positions lost. If it ever
// passes this build, it proves nothing about the real one.
func TestCrashCheckerCatchesAckBeforeSync(t *testing.T) {
	deadline := time.Now().Add(30 * time.Second)
	rec := &failRecorder{ctx: t.Context()}
	sessions := 0
	for seed := uint64(1); !rec.Failed() && time.Now().Before(deadline); seed++ {
		var stats crashStats
		runCrashSession(rec, seed, 15, &stats, &testHooks{ackBeforeSync: true})
		sessions++
	}
	if !rec.Failed() {
		t.Fatalf("the crash checker passed a log that acknowledges before fsync (%d sessions)", sessions)
	}
	lost := false
	for _, m := range rec.msg {
		lost = lost || strings.Contains(m, "lost") || strings.Contains(m, "acknowledged")
	}
	if !lost {
		t.Fatalf("the checker failed, but not for lost acknowledged data: %q", rec.msg)
	}
	t.Logf("caught after %d session(s): %s", sessions, rec.msg[0])
}
