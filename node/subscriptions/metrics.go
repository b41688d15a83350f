package subscriptions

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// The per-stream series of subscriptions, labelled by pattern and subscription name (the
// durable name, or "-"), never by stream or client: several streams with the same labels
// share a series, which is deleted when the last of them ends.

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
