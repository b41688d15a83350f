//go:build race

package node

// raceEnabled scales load tests down under the race detector, which slows frame handling
// about tenfold.
const raceEnabled = true
