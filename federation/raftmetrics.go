package federation

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicmq/quicmq/internal/wire"
)

// RaftClassStats counts one peer's raft stream of one class, both ways, over every
// connection to the peer.
type RaftClassStats struct {
	SentMessages, SentBytes, ReceivedMessages, ReceivedBytes uint64
	// Dropped by Send: the queue was full, no stream was open (the link was down or
	// reconnecting; what was queued when a stream ended counts here too), or the message
	// was larger than a frame.
	DroppedFull, DroppedNoStream, DroppedTooLarge uint64
	Queued                                        int    // messages waiting for the writer now
	Open                                          bool   // a writer has the stream to the peer open now
	Opened                                        uint64 // streams opened to the peer, over every connection
	Serving                                       int    // the peer's streams of the class served here now
}

// RaftPeerStats is one peer's raft traffic, by stream class.
type RaftPeerStats struct {
	Control, Bulk RaftClassStats
}

// RaftStats is the raft transport's counters by peer name, and the messages Send could not
// route to any link of this region.
func (f *Federation) RaftStats() (peers map[string]RaftPeerStats, unroutable uint64) {
	f.raft.mu.Lock()
	defer f.raft.mu.Unlock()
	peers = make(map[string]RaftPeerStats, len(f.raft.peers))
	for name, p := range f.raft.peers {
		peers[name] = RaftPeerStats{Control: p.class[wire.RaftControl].stats(), Bulk: p.class[wire.RaftBulk].stats()}
	}
	return peers, f.raft.unroutable.Load()
}

func (c *raftClass) stats() RaftClassStats {
	return RaftClassStats{
		SentMessages: c.sentMsgs.Load(), SentBytes: c.sentBytes.Load(),
		ReceivedMessages: c.recvMsgs.Load(), ReceivedBytes: c.recvBytes.Load(),
		DroppedFull: c.dropFull.Load(), DroppedNoStream: c.dropDown.Load(), DroppedTooLarge: c.dropLarge.Load(),
		Queued: c.queued(), Open: c.open(), Opened: c.opened.Load(), Serving: int(c.serving.Load()),
	}
}

// raftMetrics exports RaftStats per peer of this region and class, read at scrape time,
// when the transport is on. A
// peer's series exist while this node has a link to it (at most the region's nodes x 2
// classes); a peer gone from the links is forgotten at the scrape.
type raftMetrics struct {
	f                                        *Federation
	sentMsgs, sentBytes, recvMsgs, recvBytes *prometheus.Desc
	dropped, queued, unroutable              *prometheus.Desc
}

func registerRaftMetrics(f *Federation, reg prometheus.Registerer) {
	if reg == nil || f.cfg.Raft.ID == 0 {
		return
	}
	l := []string{"peer_region", "peer_node", "class"}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	reg.MustRegister(&raftMetrics{
		f:          f,
		sentMsgs:   d("quicmq_raft_sent_messages_total", "Raft messages sent to a node of this region.", l...),
		sentBytes:  d("quicmq_raft_sent_bytes_total", "Bytes of raft batches sent to a node of this region.", l...),
		recvMsgs:   d("quicmq_raft_received_messages_total", "Raft messages received from a node of this region.", l...),
		recvBytes:  d("quicmq_raft_received_bytes_total", "Bytes of raft batches received from a node of this region.", l...),
		dropped:    d("quicmq_raft_dropped_messages_total", "Raft messages dropped before sending (raft resends): reason queue_full, no_stream or too_large.", append(l, "reason")...),
		queued:     d("quicmq_raft_queued_messages", "Raft messages waiting for the stream's writer.", l...),
		unroutable: d("quicmq_raft_unroutable_messages_total", "Raft messages for a raft ID that no link of this region has (dropped)."),
	})
}

func (m *raftMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.sentMsgs, m.sentBytes, m.recvMsgs, m.recvBytes, m.dropped, m.queued, m.unroutable} {
		ch <- d
	}
}

func (m *raftMetrics) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	f := m.f
	linked := make(map[string]string) // peer name -> region, of this region's links
	for _, l := range f.links() {
		if l.peer.Region == f.cfg.Region {
			linked[l.peer.Name] = l.peer.Region
		}
	}
	f.raft.mu.Lock()
	for name := range f.raft.peers {
		if _, ok := linked[name]; !ok {
			delete(f.raft.peers, name)
		}
	}
	f.raft.mu.Unlock()
	peers, unroutable := f.RaftStats()
	counter(m.unroutable, unroutable)
	for name, ps := range peers {
		region := linked[name]
		for class, s := range map[string]RaftClassStats{"control": ps.Control, "bulk": ps.Bulk} {
			counter(m.sentMsgs, s.SentMessages, region, name, class)
			counter(m.sentBytes, s.SentBytes, region, name, class)
			counter(m.recvMsgs, s.ReceivedMessages, region, name, class)
			counter(m.recvBytes, s.ReceivedBytes, region, name, class)
			counter(m.dropped, s.DroppedFull, region, name, class, "queue_full")
			counter(m.dropped, s.DroppedNoStream, region, name, class, "no_stream")
			counter(m.dropped, s.DroppedTooLarge, region, name, class, "too_large")
			ch <- prometheus.MustNewConstMetric(m.queued, prometheus.GaugeValue, float64(s.Queued), region, name, class)
		}
	}
}
