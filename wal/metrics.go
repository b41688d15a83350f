package wal

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// metrics are the log's Prometheus series. Per-topic series are left out on
// purpose: the number of topics is unbounded.
type metrics struct {
	reg              prometheus.Registerer // nil: not registered
	collectors       []prometheus.Collector
	fsyncSeconds     prometheus.Histogram
	recordsPerCommit prometheus.Histogram
	appendedRecords  prometheus.Counter
	appendedBytes    prometheus.Counter
	logBytes         prometheus.Gauge
	topics           prometheus.Gauge
	commitErrors     prometheus.Counter
	retentionDeleted prometheus.Counter
	duplicates       prometheus.Counter
	refused          prometheus.Counter
	dedupProducers   prometheus.Gauge
	dedupEntries     prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, l *Log) (*metrics, error) {
	m := &metrics{
		reg: reg,
		fsyncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "quicmq_wal_fsync_seconds",
			Help:    "Latency of synced commits: from handing a batch to Pebble until its fsync returned.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16), // 50us .. 1.6s
		}),
		recordsPerCommit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "quicmq_wal_records_per_commit",
			Help:    "Records per synced commit (group commit batch size).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14), // 1 .. 8192
		}),
		appendedRecords: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "quicmq_wal_appended_records_total",
			Help: "Records appended durably.",
		}),
		appendedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "quicmq_wal_appended_bytes_total",
			Help: "Stored bytes (keys and encoded values) appended durably.",
		}),
		logBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "quicmq_wal_log_bytes",
			Help: "Stored bytes of all retained records (keys and encoded values), before Pebble's compression.",
		}),
		topics: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "quicmq_wal_topics",
			Help: "Durable topic logs.",
		}),
		commitErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "quicmq_wal_commit_errors_total",
			Help: "Failed synced commits (after the first, the log refuses appends).",
		}),
		retentionDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "quicmq_wal_retention_deleted_records_total",
			Help: "Records deleted by retention.",
		}),
		// Named for what a node's operator looks for: the log is where publishes are
		// de-duplicated, and every node has one log.
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "quicmq_publish_duplicates_total",
			Help: "Publishes not stored because the same (topic, producer, sequence) was stored before; answered with the original offset.",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "quicmq_publish_sequence_refused_total",
			Help: "Publishes refused because their sequence is older than the producer's de-duplication window.",
		}),
		dedupProducers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "quicmq_wal_dedup_producers",
			Help: "(topic, producer) states kept for de-duplication.",
		}),
		dedupEntries: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "quicmq_wal_dedup_entries",
			Help: "Sequences remembered for de-duplication, over all producers.",
		}),
	}
	m.collectors = []prometheus.Collector{
		m.fsyncSeconds, m.recordsPerCommit, m.appendedRecords, m.appendedBytes,
		m.logBytes, m.topics, m.commitErrors, m.retentionDeleted,
		m.duplicates, m.refused, m.dedupProducers, m.dedupEntries,
	}
	for _, t := range l.mu.topics {
		m.logBytes.Add(float64(t.hwmPos - t.firstPos))
	}
	m.topics.Set(float64(len(l.mu.topics)))
	if reg == nil {
		return m, nil
	}
	for i, c := range m.collectors {
		if err := reg.Register(c); err != nil {
			for _, done := range m.collectors[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("wal: register metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) unregister() {
	if m.reg == nil {
		return
	}
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
}

// Stats is a snapshot of the log's counters since Open, for tests and
// benchmarks.
type Stats struct {
	Appends  uint64 // requests (appends and position writes) acknowledged durable
	Records  uint64 // records appended durably
	Bytes    uint64 // stored bytes appended durably
	Commits  uint64 // synced Pebble commits (group commit batches)
	Fsyncs   uint64 // WAL fsyncs done by Pebble (several commits share one)
	LogBytes uint64 // stored bytes of all retained records
	Failed   error  // the commit failure that stopped appends, or nil

	Duplicates   uint64        // records not stored: a duplicate of a stored (topic, producer, sequence)
	Refused      uint64        // records refused: sequence older than the de-duplication window
	Rebuilt      uint64        // records scanned to rebuild de-duplication state after Open
	RebuildTime  time.Duration // time spent on those scans (on the committer)
	DedupStates  int           // (topic, producer) states; read by the committer's last batch with producers
	DedupEntries int           // sequences remembered; likewise
}

// Stats returns a snapshot of the counters.
func (l *Log) Stats() Stats {
	s := Stats{
		Appends: l.stats.appends.Load(),
		Records: l.stats.records.Load(),
		Bytes:   l.stats.bytes.Load(),
		Commits: l.stats.commits.Load(),

		Duplicates:   l.stats.duplicates.Load(),
		Refused:      l.stats.refused.Load(),
		Rebuilt:      l.stats.rebuilt.Load(),
		RebuildTime:  time.Duration(l.stats.rebuildNanos.Load()),
		DedupStates:  int(l.stats.dedupStates.Load()),
		DedupEntries: int(l.stats.dedupEntries.Load()),
	}
	if p := l.failed.Load(); p != nil {
		s.Failed = *p
	}
	l.mu.RLock()
	for _, t := range l.mu.topics {
		s.LogBytes += t.hwmPos - t.firstPos
	}
	l.mu.RUnlock()
	if db, err := l.readDB(); err == nil {
		h := db.Metrics().LogWriter.FsyncLatency
		l.db.RUnlock()
		var pb dto.Metric
		if h != nil && h.Write(&pb) == nil {
			s.Fsyncs = pb.GetHistogram().GetSampleCount()
		}
	}
	return s
}
