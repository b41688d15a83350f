package node

// PacketsSent is the number of QUIC packets, and their bytes, the node sent on its client
// connections that have a subscription open (quic-go's ConnectionStats), for the benchmarks'
// packets per record.
func (n *Node) PacketsSent() (packets, bytes uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for s := range n.mu.sessions {
		if s.subs.Load() == 0 {
			continue
		}
		st := s.conn.ConnectionStats()
		packets += st.PacketsSent
		bytes += st.BytesSent
	}
	return packets, bytes
}

// TailStats are the shared tails' counters: reads of the log into a tail, and records
// served from one.
func (n *Node) TailStats() (fills, served uint64) {
	st := n.tails.Stats()
	return st.Fills, st.Served
}

// FanoutStats are the fanouts' counters (node/tail): subscriptions parked on one, handed
// back to their run goroutine, and records a fanout wrote.
func (n *Node) FanoutStats() (parks, handbacks, records uint64) {
	st := n.tails.Stats()
	return st.Parks, st.Handbacks, st.Fanned
}

// FanoutWaits is the number of rounds a fanout held back for its connection to send what it
// had queued (node/tail's fanout.go, waitSent).
func (n *Node) FanoutWaits() uint64 { return n.tails.Stats().Waits }

// OnPark has f called each time a subscription parks on a fanout, from its run goroutine.
func (n *Node) OnPark(f func()) { n.tails.OnPark(f) }
