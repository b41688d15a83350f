package testlog

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The tree's one way for a test to wait for an event it can only observe by looking: WaitFor
// and WaitForErr on a test's goroutine, Until from any other. They look every millisecond at
// first and back off to every 20 ms, so that a condition that holds soon is seen soon and a
// long wait costs little CPU on a loaded machine. A test waits for a condition, never for a
// time; Pause is for time that is itself the point.

const (
	firstLook = time.Millisecond
	maxLook   = 20 * time.Millisecond
)

// WaitFor waits until cond holds and returns how long that took; it fails t with what after
// timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	return WaitForErr(t, timeout, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

var errNotYet = errors.New("the condition does not hold")

// WaitForErr is WaitFor for a condition that says what is still missing: nil once it holds,
// otherwise an error, the last of which goes into the failure.
func WaitForErr(t testing.TB, timeout time.Duration, what string, cond func() error) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(timeout))
	defer cancel()
	if err := UntilErr(ctx, cond); err != nil {
		t.Fatalf("waiting for %s: not within %v: %v", what, timeout, err)
	}
	return time.Since(start)
}

// Until waits until cond holds or ctx ends (then it returns ctx's error). It may run on any
// goroutine: it does not touch a testing.T.
func Until(ctx context.Context, cond func() bool) error {
	return UntilErr(ctx, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

// UntilErr is Until for a condition that says what is missing: when ctx ends first it returns
// the condition's last error joined to ctx's.
func UntilErr(ctx context.Context, cond func() error) error {
	look := firstLook
	timer := time.NewTimer(look)
	defer timer.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			if err == errNotYet {
				return ctx.Err()
			}
			return errors.Join(err, ctx.Err())
		case <-timer.C:
		}
		look = min(2*look, maxLook)
		timer.Reset(look)
	}
}

// Pause lets d pass, or less if ctx ends first (it then returns false). It is for time that
// is itself the point: a load generator's back-off before it retries, or a step of a fault
// schedule (a cut held for 30 s, a random moment to kill at). It is never a wait for
// something to happen: that is WaitFor's.
func Pause(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}
