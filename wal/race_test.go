//go:build race

package wal

// raceEnabled: the race detector changes what an allocation costs the heap (its shadow
// state, allocations that would stay on the stack), so heap-per-topic bounds hold only
// without it.
const raceEnabled = true
