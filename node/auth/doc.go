// Package auth is who a client session acts for: the node's credentials (tokens and client
// certificates), the principal a HELLO authenticates as, its tenant's namespace (how a
// client's topic, pattern and durable names map to the node's and back) and its publish and
// subscribe grants.
//
// It owns no state that changes: a Principal is made once per session and read by every
// stream of it. It must not touch the log, the network or the node: what it decides is a
// pure function of the credentials and the names it is given, so sessions, management and
// the consumer groups all ask it the same question the same way.
package auth
