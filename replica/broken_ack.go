//go:build quicmq_broken_ack

package replica

import "os"

// A deliberately broken build: acknowledges publishes before they commit
// (broken_hook.go). It says so on stderr, once, as the process starts.
func init() {
	brokenAckBuild = true
	os.Stderr.WriteString("replica: BROKEN BUILD (-tags quicmq_broken_ack): proposals are answered once this node's own log has them synced, before a quorum does\n")
}
