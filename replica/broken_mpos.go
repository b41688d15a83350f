//go:build quicmq_broken_mpos

package replica

// dropPositionVector is set only in a binary built with -tags quicmq_broken_mpos: a set
// position entry then stores its position without the vector it carries (as before portable
// positions on replicated topics), so that the node's cross-region failover tests of
// replicated regions (node/mpos_test.go) can be shown to fail on it. No release is built
// with the tag.
const dropPositionVector = true
