package node

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the node's own series (the log's are registered by package wal on the same
// registerer). Per-subscription series are labelled by pattern and subscription name (the
// durable name, or "-"), never by stream or client: several streams with the same labels share
// a series, which is deleted when the last of them ends.
type metrics struct {
	connections     prometheus.Gauge
	publishRecords  prometheus.Counter
	publishBytes    prometheus.Counter
	publishErrors   *prometheus.CounterVec
	publishLatency  prometheus.Histogram
	subscriptions   prometheus.Gauge
	subscribeErrors *prometheus.CounterVec

	sub   subMetrics
	topic topicMetrics
}

// topicMetrics are the per-topic publish series, labelled by the topic's name in the log (a
// tenant's topics with their namespace). A topic's series live as long as the node: past
// the cap of distinct topics, further topics are counted under topic "_other", as streams
// past the cap of subscription series are.
type topicMetrics struct {
	records *prometheus.CounterVec
	bytes   *prometheus.CounterVec

	max int
	mu  struct {
		sync.Mutex
		series map[string]*topicSeries
	}
}

// topicSeries are one topic's handles on its publish series.
type topicSeries struct {
	records prometheus.Counter
	bytes   prometheus.Counter
}

type subMetrics struct {
	records *prometheus.CounterVec
	bytes   *prometheus.CounterVec
	acks    *prometheus.CounterVec
	blocked *prometheus.CounterVec
	streams *prometheus.GaugeVec

	max int
	mu  struct {
		sync.Mutex
		refs map[[2]string]int
	}
}

func newMetrics(reg prometheus.Registerer, maxSeries int) *metrics {
	labels := []string{"pattern", "subscription"}
	m := &metrics{
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "quicmq_connections", Help: "Open client connections."}),
		publishRecords: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "quicmq_publish_records_total", Help: "Records published and acknowledged (durable)."}),
		publishBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "quicmq_publish_bytes_total", Help: "Payload bytes published and acknowledged."}),
		publishErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quicmq_publish_errors_total", Help: "Publishes answered with PUBLISH_ERROR, by error code."},
			[]string{"code"}),
		publishLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "quicmq_publish_ack_seconds",
			Help:    "Time from reading a publish to sending its ack (includes the fsync).",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16)}),
		subscriptions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "quicmq_subscriptions", Help: "Open subscription streams."}),
		subscribeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quicmq_subscribe_errors_total", Help: "Subscriptions refused or ended by an error, by error code."},
			[]string{"code"}),
		sub: subMetrics{
			max: maxSeries,
			records: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "quicmq_subscription_records_total", Help: "Records delivered on subscription streams."}, labels),
			bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "quicmq_subscription_bytes_total", Help: "Payload bytes delivered on subscription streams."}, labels),
			acks: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "quicmq_subscription_acks_total", Help: "ACK frames received on subscription streams."}, labels),
			blocked: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "quicmq_subscription_blocked_seconds_total",
				Help: "Time subscription streams spent waiting to write: QUIC flow control from a slow reader."}, labels),
			streams: prometheus.NewGaugeVec(prometheus.GaugeOpts{
				Name: "quicmq_subscription_streams", Help: "Open subscription streams with these labels."}, labels),
		},
	}
	m.sub.mu.refs = make(map[[2]string]int)
	m.topic = topicMetrics{
		max: maxSeries,
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quicmq_topic_published_records_total",
			Help: "Records published to the topic and acknowledged (durable), counted on the topic's owner; duplicates are not counted."},
			[]string{"topic"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quicmq_topic_published_bytes_total",
			Help: "Payload bytes of the records counted by quicmq_topic_published_records_total."},
			[]string{"topic"}),
	}
	m.topic.mu.series = make(map[string]*topicSeries)
	reg.MustRegister(m.connections, m.publishRecords, m.publishBytes, m.publishErrors, m.publishLatency,
		m.subscriptions, m.subscribeErrors,
		m.sub.records, m.sub.bytes, m.sub.acks, m.sub.blocked, m.sub.streams,
		m.topic.records, m.topic.bytes)
	return m
}

// of returns topic's series, creating them if the cap allows; past it, the "_other" series.
func (t *topicMetrics) of(topic string) *topicSeries {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ts, ok := t.mu.series[topic]; ok {
		return ts
	}
	label := topic
	if len(t.mu.series) >= t.max {
		label = "_other"
	}
	ts := &topicSeries{records: t.records.WithLabelValues(label), bytes: t.bytes.WithLabelValues(label)}
	if label == topic {
		t.mu.series[topic] = ts
	}
	return ts
}

// subSeries are one subscription stream's handles on its (possibly shared) series.
type subSeries struct {
	owner   *subMetrics
	key     [2]string
	records prometheus.Counter
	bytes   prometheus.Counter
	acks    prometheus.Counter
	blocked prometheus.Counter
}

// acquire returns handles for a subscription's series, creating them if needed. Past the cap
// of distinct label sets, the stream is counted under pattern and subscription "_other".
func (s *subMetrics) acquire(pattern, name string) *subSeries {
	key := [2]string{pattern, name}
	s.mu.Lock()
	if _, ok := s.mu.refs[key]; !ok && len(s.mu.refs) >= s.max {
		key = [2]string{"_other", "_other"}
	}
	s.mu.refs[key]++
	s.mu.Unlock()
	s.streams.WithLabelValues(key[0], key[1]).Inc()
	return &subSeries{
		owner:   s,
		key:     key,
		records: s.records.WithLabelValues(key[0], key[1]),
		bytes:   s.bytes.WithLabelValues(key[0], key[1]),
		acks:    s.acks.WithLabelValues(key[0], key[1]),
		blocked: s.blocked.WithLabelValues(key[0], key[1]),
	}
}

// release drops the stream's share; the series are deleted with the last stream.
func (ss *subSeries) release() {
	s := ss.owner
	s.streams.WithLabelValues(ss.key[0], ss.key[1]).Dec()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.refs[ss.key]--
	if s.mu.refs[ss.key] > 0 {
		return
	}
	delete(s.mu.refs, ss.key)
	l := prometheus.Labels{"pattern": ss.key[0], "subscription": ss.key[1]}
	for _, v := range []*prometheus.MetricVec{s.records.MetricVec, s.bytes.MetricVec, s.acks.MetricVec,
		s.blocked.MetricVec, s.streams.MetricVec} {
		v.Delete(l)
	}
}

// lagCollector computes each subscription's lag when scraped: head minus delivered, summed
// over its topics and over the streams sharing its labels. Computing it at scrape time keeps it
// true while a stream is blocked on flow control, which is exactly when it matters.
type lagCollector struct {
	n    *Node
	desc *prometheus.Desc
}

func newLagCollector(n *Node) *lagCollector {
	return &lagCollector{n: n, desc: prometheus.NewDesc("quicmq_subscription_lag_records",
		"Records durable in matching topics but not yet delivered (head - delivered).",
		[]string{"pattern", "subscription"}, nil)}
}

func (c *lagCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *lagCollector) Collect(ch chan<- prometheus.Metric) {
	sums := make(map[[2]string]float64)
	for _, sub := range c.n.liveSubscriptions() {
		sums[sub.series.key] += float64(sub.lag())
	}
	for k, v := range sums {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, k[0], k[1])
	}
}
