package client

import (
	"errors"
	"net"
	"syscall"
)

// A node whose address has nothing listening on its UDP port answers every packet with ICMP
// port unreachable, but quic-go's socket is not connected and never sees it: the handshake
// would wait for its timeout (5 s). So while the handshake runs, dialNode sends one datagram
// from a connected socket of its own, on which the kernel reports the ICMP answer as
// ECONNREFUSED. The datagram is one zero byte: its first two bits clear mark it as no QUIC
// packet (RFC 9443), and a live node's quic-go drops it before any parsing, logging or
// counting. A host that filters ICMP, or a lost datagram, leaves the handshake to decide as
// before.

// refusedError is the failure of a dial to an address where nothing listens. It wraps the
// probe's error, so errors.Is(err, syscall.ECONNREFUSED) holds.
type refusedError struct{ err error }

func (e *refusedError) Error() string {
	return "connection refused (nothing listens on that UDP port)"
}

func (e *refusedError) Unwrap() error { return e.err }

// probeDatagram is what the probe sends: no QUIC packet (first byte 0).
var probeDatagram = []byte{0}

// startProbe sends the probe datagram to raddr and calls refused, on the probe's goroutine,
// if the host answers that nothing listens there. stop ends the probe and returns once its
// goroutine has exited; refused is never called after stop returned.
func startProbe(network string, raddr *net.UDPAddr, refused func(error)) (stop func()) {
	pc, err := net.DialUDP(network, nil, raddr)
	if err != nil {
		return func() {} // no probe: the handshake decides
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := pc.Write(probeDatagram); err != nil {
			if errors.Is(err, syscall.ECONNREFUSED) {
				refused(err)
			}
			return
		}
		var b [1]byte
		for {
			_, err := pc.Read(b[:])
			if err == nil {
				continue // a datagram from the node: no refusal; keep listening
			}
			if errors.Is(err, syscall.ECONNREFUSED) {
				refused(err)
			}
			return // refused, or stop closed the socket
		}
	}()
	return func() {
		pc.Close()
		<-done
	}
}
