//go:build !quicmq_broken_offsets

package replica

// predictOffsets returns done unchanged: offsets are assigned when a committed entry is
// applied (I9). The broken build (broken_offsets.go) assigns them when the leader proposes.
func (e *engine) predictOffsets(_ uint64, _ []byte, done func(Result, error)) func(Result, error) {
	return done
}
