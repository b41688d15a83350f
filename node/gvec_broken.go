//go:build quicmq_broken_gvec

package node

// ignoreMirroredGroups, in the build tagged quicmq_broken_gvec, makes a group ignore the states
// of it mirrored from other regions (node/groups/vector.go): a group that fails over to another region
// starts there from its first member's start, as before portable group positions. Only for
// showing that cmd/quicmq's TestKill9HomeRegionGroupFailsOver fails without them.
const ignoreMirroredGroups = true
