package federation

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics: counters that outlive a connection are ordinary counters; per-link and per-mirror
// figures are read at scrape time (ConnectionStats, the links' counters, the mirrors'
// atomics), so a link's series exist exactly while the link does and need no cleanup. The
// link's byte and packet totals are counters over every connection to the peer
// (linkCounters): a reconnect or a migration does not reset them.
type metrics struct {
	f        *Federation
	mirrored prometheus.Counter
	gaps     prometheus.Counter
	max      int

	linkRTT, linkMinRTT, linkCwnd, linkStreams, linkUp                      *prometheus.Desc
	linkSent, linkRecv, linkLost, linkSentPkts, linkRecvPkts, linkLostBytes *prometheus.Desc
	linkMigrations, linkReconnects                                          *prometheus.Desc
	linkMirrored, linkWaiting, linkStalled                                  *prometheus.Desc
	mirrorLag, mirrorLagSeconds, mirrorRecords, mirrorStalled               *prometheus.Desc
}

func newMetrics(f *Federation, reg prometheus.Registerer, maxSeries int) *metrics {
	link := []string{"peer_region", "peer_node"}
	mir := []string{"topic", "origin_region"}
	d := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	m := &metrics{
		f:   f,
		max: maxSeries,
		mirrored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "quicmq_mirror_appended_records_total", Help: "Records mirrored from other regions into the local log."}),
		gaps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "quicmq_mirror_gap_records_total",
			Help: "Records deleted by an origin's retention before they could be mirrored (reported, never hidden)."}),
		linkUp:     d("quicmq_link_up", "1 if the link's QUIC connection is established.", link),
		linkRTT:    d("quicmq_link_rtt_seconds", "Smoothed round-trip time of the link.", link),
		linkMinRTT: d("quicmq_link_min_rtt_seconds", "Minimum round-trip time of the link.", link),
		linkCwnd:   d("quicmq_link_congestion_window_bytes", "Congestion window of the link's sender.", link),
		linkSent: d("quicmq_link_sent_bytes_total",
			"Bytes sent on the link (QUIC payload, retransmissions included), over all its connections.", link),
		linkRecv: d("quicmq_link_received_bytes_total", "Bytes received on the link, over all its connections.", link),
		linkLost: d("quicmq_link_lost_packets_total",
			"Packets of the link declared lost, over all its connections (one declared lost and received later still counts).", link),
		linkSentPkts:  d("quicmq_link_sent_packets_total", "Packets sent on the link, lost ones included, over all its connections.", link),
		linkRecvPkts:  d("quicmq_link_received_packets_total", "Packets received on the link, over all its connections.", link),
		linkLostBytes: d("quicmq_link_lost_bytes_total", "Bytes of the link's packets declared lost, over all its connections.", link),
		linkStreams: d("quicmq_link_mirror_streams",
			"Mirror streams open on the link (at most MaxMirrorStreams: mirrors of topics that move; quiet ones park).", link),
		linkMirrored: d("quicmq_link_mirrored_topics", "Topics mirrored over the link, with or without a stream.", link),
		linkWaiting: d("quicmq_link_mirrors_waiting",
			"Mirrored topics whose origin head moved, waiting for one of the link's mirror streams.", link),
		linkStalled:    d("quicmq_link_mirrors_stalled", "Mirrors of the link reported stalled (quicmq_mirror_stalled, not capped).", link),
		linkMigrations: d("quicmq_link_migrations_total", "Connection migrations of the link to a new local socket.", link),
		linkReconnects: d("quicmq_link_reconnects_total", "Times the link was re-established after losing its connection.", link),
		mirrorLag: d("quicmq_mirror_lag_records",
			"Records of the origin's log not yet scanned by this mirror (upper bound).", mir),
		mirrorLagSeconds: d("quicmq_mirror_lag_seconds",
			"Origin time between the origin's head as the origin last reported it and the last record this mirror scanned (grows while the mirror is stuck).", mir),
		mirrorStalled: d("quicmq_mirror_stalled",
			"1 while the mirror has carried no records for StallAfter although the origin reports its head past the mirror's position.", mir),
		mirrorRecords: d("quicmq_mirror_records_total", "Records mirrored by this mirror stream since it started.", mir),
	}
	if reg != nil {
		reg.MustRegister(m.mirrored, m.gaps, m)
	}
	return m
}

func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.linkUp, m.linkRTT, m.linkMinRTT, m.linkCwnd, m.linkSent,
		m.linkRecv, m.linkLost, m.linkSentPkts, m.linkRecvPkts, m.linkLostBytes, m.linkStreams,
		m.linkMigrations, m.linkReconnects, m.linkMirrored, m.linkWaiting, m.linkStalled,
		m.mirrorLag, m.mirrorLagSeconds, m.mirrorRecords, m.mirrorStalled} {
		ch <- d
	}
}

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	counter := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	series := 0
	seen := make(map[[2]string]bool) // a topic held by two nodes of one region (a conflict) must not repeat a series
	for _, l := range m.f.links() {
		li := l.infoWith(false)
		r, n := l.peer.Region, l.peer.Name
		up := 0.0
		if li.Connected {
			up = 1
		}
		gauge(m.linkUp, up, r, n)
		counter(m.linkMigrations, float64(li.Migrations), r, n)
		counter(m.linkReconnects, float64(li.Reconnects), r, n)
		gauge(m.linkStreams, float64(li.MirrorStreams), r, n)
		gauge(m.linkMirrored, float64(li.MirroredTopics), r, n)
		gauge(m.linkWaiting, float64(li.MirrorsWaiting), r, n)
		gauge(m.linkStalled, float64(li.MirrorsStalled), r, n)
		tot := l.counters.total()
		counter(m.linkSent, float64(tot.BytesSent), r, n)
		counter(m.linkRecv, float64(tot.BytesReceived), r, n)
		counter(m.linkLost, float64(tot.PacketsLost), r, n)
		counter(m.linkSentPkts, float64(tot.PacketsSent), r, n)
		counter(m.linkRecvPkts, float64(tot.PacketsReceived), r, n)
		counter(m.linkLostBytes, float64(tot.BytesLost), r, n)
		if li.Connected {
			gauge(m.linkRTT, li.RTT.Seconds(), r, n)
			gauge(m.linkMinRTT, li.MinRTT.Seconds(), r, n)
			gauge(m.linkCwnd, float64(li.CongestionWindow), r, n)
		}
		// Per mirror, capped: the open mirrors, then those stalled or waiting for a stream
		// (a parked mirror is caught up: lag 0, not stalled, no series).
		l.mu.Lock()
		mirrors := make([]*mirror, 0, len(l.mu.mirrors))
		for _, mi := range l.mu.mirrors {
			mirrors = append(mirrors, mi)
		}
		var parked []string
		for t := range l.mu.stalled {
			if l.mu.mirrors[t] == nil {
				parked = append(parked, t)
			}
		}
		for t := range l.mu.queued {
			if len(mirrors)+len(parked) >= m.max {
				break
			}
			parked = append(parked, t)
		}
		healths := make([]*mirrorHealth, len(parked))
		for i, t := range parked {
			healths[i] = l.mu.health[t]
		}
		l.mu.Unlock()
		now := m.f.cfg.Now()
		for _, mi := range mirrors {
			key := [2]string{mi.topic, r}
			if series >= m.max || seen[key] {
				continue // cardinality cap: the totals above still count everything
			}
			seen[key] = true
			series++
			recs, secs, stalled := mi.lag()
			gauge(m.mirrorLag, float64(recs), mi.topic, r)
			gauge(m.mirrorLagSeconds, secs, mi.topic, r)
			gauge(m.mirrorStalled, b2f(stalled), mi.topic, r)
			counter(m.mirrorRecords, float64(mi.records.Load()), mi.topic, r)
		}
		for i, t := range parked {
			key := [2]string{t, r}
			if series >= m.max || seen[key] || healths[i] == nil {
				continue
			}
			seen[key] = true
			series++
			secs, stalled := healths[i].lag(now)
			gauge(m.mirrorLag, float64(healths[i].lagRecords()), t, r)
			gauge(m.mirrorLagSeconds, secs, t, r)
			gauge(m.mirrorStalled, b2f(stalled), t, r)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
