//go:build quicmq_broken_retain

package replica

// brokenRestoreIgnoresFirst: a deliberately broken build (-tags quicmq_broken_retain) whose
// snapshot installation ignores the snapshot's log start, so a replica that catches up after
// cuts keeps another first offset than its peers: the node tests of replicated retention must
// fail on it.
const brokenRestoreIgnoresFirst = true
