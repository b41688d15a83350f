package node

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicmq/quicmq/node/subscriptions"
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

	sub   *subscriptions.Metrics // per subscription stream (node/subscriptions)
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

func newMetrics(reg prometheus.Registerer, maxSeries int) *metrics {
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
	}
	m.sub = subscriptions.NewMetrics(reg, maxSeries, m.subscriptions, m.subscribeErrors)
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

// forget deletes a deleted topic's publish series; a topic of the same name created later
// starts them again.
func (t *topicMetrics) forget(topic string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.mu.series[topic]; !ok {
		return
	}
	delete(t.mu.series, topic)
	t.records.DeleteLabelValues(topic)
	t.bytes.DeleteLabelValues(topic)
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
		sums[sub.SeriesKey()] += float64(sub.Lag())
	}
	for k, v := range sums {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, k[0], k[1])
	}
}
