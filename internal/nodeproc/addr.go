package nodeproc

import (
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
)

// FreeAddr returns a 127.0.0.1 address whose port is free for both TCP and UDP (serf uses
// both), for a node that must come back on the same address after a kill. The port is taken
// below the kernel's ephemeral range, so that no socket bound to port 0 meanwhile (the links'
// dialing sockets) can take it while the node is down. The probe holds no port, so the ports
// handed out are remembered: a mesh asks for a dozen, and two of them the same port would
// fail its start (as it once did, "us2 exited before listening").
func FreeAddr(t testing.TB) string {
	t.Helper()
	givenMu.Lock()
	defer givenMu.Unlock()
	for range 200 {
		port := 20000 + rand.IntN(12000)
		if given[port] {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		tl, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		ul, err := net.ListenPacket("udp", addr)
		tl.Close()
		if err == nil {
			ul.Close()
			given[port] = true
			return addr
		}
	}
	t.Fatal("no free port for TCP and UDP")
	return ""
}

// given holds the ports FreeAddr returned in this process.
var (
	givenMu sync.Mutex
	given   = map[int]bool{}
)
