package testlog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestWaitForSeesTheEvent: a condition made true by another goroutine ends the wait.
func TestWaitForSeesTheEvent(t *testing.T) {
	var done atomic.Bool
	go func() { done.Store(true) }()
	WaitFor(t, 10*time.Second, "the goroutine", done.Load)
}

// fakeT records a failure instead of ending the test, so that the failure itself is checked.
type fakeT struct {
	testing.TB
	msg string
}

func (f *fakeT) Helper()                           {}
func (f *fakeT) Fatalf(format string, args ...any) { f.msg = fmt.Sprintf(format, args...) }

// TestWaitForErrFailsWithTheLastError: a condition that never holds fails the test after the
// timeout, naming what was awaited and the condition's last word.
func TestWaitForErrFailsWithTheLastError(t *testing.T) {
	f := &fakeT{TB: t}
	n := 0
	WaitForErr(f, 30*time.Millisecond, "three replicas", func() error {
		n++
		return errors.New("2 of 3")
	})
	if !strings.Contains(f.msg, "three replicas") || !strings.Contains(f.msg, "2 of 3") {
		t.Fatalf("failure %q names neither what was awaited nor the last error", f.msg)
	}
	if n < 2 {
		t.Fatalf("the condition was looked at %d times in 30 ms", n)
	}
}

// TestUntilEndsWithItsContext: Until returns the context's error when the condition never holds.
func TestUntilEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Until(ctx, func() bool { return false }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Until on a cancelled context: %v", err)
	}
	if Pause(ctx, time.Hour) {
		t.Fatal("Pause on a cancelled context let the hour pass")
	}
}
