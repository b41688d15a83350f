//go:build !quicmq_broken_mpos

package replica

// dropPositionVector: see broken_mpos.go.
const dropPositionVector = false
