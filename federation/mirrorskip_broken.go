//go:build quicmq_broken_mirrorskip

package federation

import "sync/atomic"

// brokenSkips counts the records a node's mirrors received.
var brokenSkips atomic.Uint64

// brokenSkip, in the build tagged quicmq_broken_mirrorskip, makes the mirrors of a node drop
// one record in every 500 they receive (counted across all of them): the record is taken as
// received, so the cursor moves past it, but it is not appended (mirror.apply). Only for
// showing that cmd/quicmq's TestMirrorLoadCampaign catches a mirror that loses records
// (scripts/broken.sh).
func brokenSkip() bool { return brokenSkips.Add(1)%500 == 0 }
