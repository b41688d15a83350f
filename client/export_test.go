package client

import "net"

// WithRouteSource makes a Conn dialed with o look up its route's local address with f
// instead of asking the host (tests of Options.MigrateCheck).
func WithRouteSource(o Options, f func(*net.UDPAddr) (string, error)) Options {
	o.routeSource = f
	return o
}
