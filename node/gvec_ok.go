//go:build !quicmq_broken_gvec

package node

// ignoreMirroredGroups is true only in the build that shows the group failover checker failing
// (gvec_broken.go).
const ignoreMirroredGroups = false
