package testlog

import "testing"

// TestRandSeedFromEnv: a schedule logged with its seed is drawn again from QUICMQ_TEST_SEED.
func TestRandSeedFromEnv(t *testing.T) {
	t.Setenv("QUICMQ_TEST_SEED", "12345")
	a, b := Rand(t, "first"), Rand(t, "again")
	for i := range 16 {
		if x, y := a.Uint64(), b.Uint64(); x != y {
			t.Fatalf("draw %d: %d, then %d from the same seed", i, x, y)
		}
	}
}
