package federation

import (
	"sync"
	"time"

	"github.com/quic-go/quic-go"
)

// linkCounts are the cumulative figures of a link's connections, as quic-go counts them.
type linkCounts struct {
	BytesSent, BytesReceived, BytesLost       uint64
	PacketsSent, PacketsReceived, PacketsLost uint64
}

func countsOf(st quic.ConnectionStats) linkCounts {
	return linkCounts{
		BytesSent: st.BytesSent, BytesReceived: st.BytesReceived, BytesLost: st.BytesLost,
		PacketsSent: st.PacketsSent, PacketsReceived: st.PacketsReceived, PacketsLost: st.PacketsLost,
	}
}

// raise keeps, field by field, the higher of c and o: quic-go's lost figures can fall (a
// packet declared lost that arrives after all), a counter never does.
func (c *linkCounts) raise(o linkCounts) {
	c.BytesSent, c.BytesReceived, c.BytesLost = max(c.BytesSent, o.BytesSent), max(c.BytesReceived, o.BytesReceived), max(c.BytesLost, o.BytesLost)
	c.PacketsSent, c.PacketsReceived, c.PacketsLost = max(c.PacketsSent, o.PacketsSent), max(c.PacketsReceived, o.PacketsReceived), max(c.PacketsLost, o.PacketsLost)
}

func (c *linkCounts) add(o linkCounts) {
	c.BytesSent += o.BytesSent
	c.BytesReceived += o.BytesReceived
	c.BytesLost += o.BytesLost
	c.PacketsSent += o.PacketsSent
	c.PacketsReceived += o.PacketsReceived
	c.PacketsLost += o.PacketsLost
}

// linkCounters sums a peer's link figures over every connection any link to it has had, so
// the _total metrics survive reconnects, migrations (one connection throughout) and a link
// replaced after the peer's address changed: the closed connections' final figures plus each
// open connection's, read at scrape time. The Federation keeps one per peer while the peer
// is in the mesh (reconcile); it is shared by that peer's successive links.
type linkCounters struct {
	mu     sync.Mutex
	closed linkCounts
	open   map[*quic.Conn]*linkCounts // the highest figures seen so far on each open connection
	// upSince is when the peer's links last came back: the local time the first connection
	// after an outage opened (park.go: records of a later origin time are live). A connection
	// that opens within a grace of the last one's end, or beside an open one (a link
	// replaced), keeps it. endedAt is when the last connection ended.
	upSince, endedAt time.Time
}

func newLinkCounters() *linkCounters {
	return &linkCounters{open: make(map[*quic.Conn]*linkCounts)}
}

// opened starts counting conn, opened at now; a connection that opens more than grace after
// the peer's last one ended begins a new upSince.
func (c *linkCounters) opened(conn *quic.Conn, now time.Time, grace time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.comeBackLocked(now, grace)
	c.open[conn] = &linkCounts{}
}

// comeBackLocked notes a connection opening at now, before it is counted as open.
func (c *linkCounters) comeBackLocked(now time.Time, grace time.Duration) {
	if len(c.open) == 0 && (c.upSince.IsZero() || now.Sub(c.endedAt) > grace) {
		c.upSince = now
	}
}

// connected reports whether a connection to the peer is open.
func (c *linkCounters) connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.open) > 0
}

// since is when the peer's links last came back after an outage (zero: never connected).
func (c *linkCounters) since() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.upSince
}

// ended folds conn's final figures, at its end at now, into the sum of closed connections.
func (c *linkCounters) ended(conn *quic.Conn, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen, ok := c.open[conn]
	if !ok {
		return
	}
	seen.raise(countsOf(conn.ConnectionStats()))
	c.closed.add(*seen)
	delete(c.open, conn)
	c.endedAt = now
}

// total is the sum over every connection so far, never lower than a previous total.
func (c *linkCounters) total() linkCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	sum := c.closed
	for conn, seen := range c.open {
		seen.raise(countsOf(conn.ConnectionStats()))
		sum.add(*seen)
	}
	return sum
}
