//go:build quicmq_broken_group

package node

import "os"

// A deliberately broken build: consumer group state on replicated topics is stored in the
// serving node's own log only (grouprepl.go). It says so on stderr, once, as the process
// starts.
func init() {
	groupStateLocalOnly = true
	os.Stderr.WriteString("node: BROKEN BUILD (-tags quicmq_broken_group): consumer group state is stored on the serving node only, not replicated\n")
}
