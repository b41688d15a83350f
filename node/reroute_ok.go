//go:build !quicmq_broken_reroute

package node

// rerouteUnordered is true only in the build that shows the drain checker failing on order
// (reroute_broken.go).
const rerouteUnordered = false
