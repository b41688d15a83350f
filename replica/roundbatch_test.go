package replica

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestRoundBatchGrowsAndShrinks checks that the rounds' batch is kept through rounds larger
// than its base size (a loaded follower's rounds reach 16 MB: a batch made afresh for each
// of them wrote into memory new to the process), and that it shrinks back once
// roundBatchKeepTicks ticks pass without such a round, the ticker running until then.
func TestRoundBatchGrowsAndShrinks(t *testing.T) {
	e := newEngine(Config{DB: openTestDB(t, vfs.NewMem())})
	payload := make([]byte, 12<<20)
	round := func(size int) {
		t.Helper()
		b, release := e.roundBatch(size)
		// Fill it as a round would: the bytes the guess promised.
		if err := b.Set([]byte("k"), payload[:size], nil); err != nil {
			t.Fatal(err)
		}
		release()
	}
	round(1 << 20)
	if e.batchCap != roundBatchBase || e.needsTicks() {
		t.Fatalf("after a 1 MiB round: buffer %d, needs ticks %v; want %d, false", e.batchCap, e.needsTicks(), roundBatchBase)
	}
	round(12 << 20)
	big := e.batch
	if e.batchCap < 12<<20 {
		t.Fatalf("after a 12 MiB round the kept buffer is %d bytes", e.batchCap)
	}
	for _, size := range []int{1 << 20, 12 << 20, 3 << 20, 10 << 20} {
		round(size)
		if e.batch != big {
			t.Fatalf("a round of %d bytes after one of 12 MiB made a new batch", size)
		}
	}
	if a := testing.AllocsPerRun(5, func() { round(12 << 20) }); a > 1 {
		t.Errorf("steady 12 MiB rounds: %.0f allocations a round, want the kept buffer (at most 1: the release closure)", a)
	}
	for i := range roundBatchKeepTicks - 1 {
		if !e.needsTicks() {
			t.Fatalf("tick %d: the ticker would stop with a %d-byte buffer kept", i, e.batchCap)
		}
		e.batchTick()
	}
	if e.batch != big {
		t.Fatal("the large batch was given back before roundBatchKeepTicks ticks")
	}
	e.batchTick()
	if e.batch != nil || e.batchCap != 0 || e.needsTicks() {
		t.Fatalf("after %d ticks without a large round: batch kept %v, buffer %d, needs ticks %v", roundBatchKeepTicks, e.batch != nil, e.batchCap, e.needsTicks())
	}
	round(100 << 10)
	if e.batchCap != roundBatchBase {
		t.Fatalf("the next small round's buffer is %d bytes, want %d", e.batchCap, roundBatchBase)
	}
}
