//go:build !quicmq_broken_retain

package replica

// brokenRestoreIgnoresFirst is false in every real build: see broken_retain.go.
const brokenRestoreIgnoresFirst = false
