package testlog

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
)

// Rand returns the random source of one of t's schedules (what it draws, for the log):
// seeded from QUICMQ_TEST_SEED when set, to run a logged schedule again, or else from the
// clock. The seed is logged either way.
func Rand(t testing.TB, what string) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("QUICMQ_TEST_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("QUICMQ_TEST_SEED=%q: want an unsigned integer", v)
		}
		seed = s
	}
	t.Logf("seed %d (%s; QUICMQ_TEST_SEED=%d draws them again)", seed, what, seed)
	return rand.New(rand.NewPCG(seed, 1))
}
