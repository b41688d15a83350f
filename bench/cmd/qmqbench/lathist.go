package main

import (
	"math"
	"sync/atomic"
)

// latHist is a latency histogram safe for concurrent adds, with log-spaced buckets 2% wide
// from 1 µs to about 100 s: the one-topic scenarios deliver up to millions of records per
// second, too many to keep each latency.
type latHist struct {
	n       atomic.Int64
	buckets [latBuckets]atomic.Int64
}

const (
	latBuckets = 940
	latGrowth  = 1.02
)

var logLatGrowth = math.Log(latGrowth)

// add records one latency in nanoseconds (clamped into the histogram's range).
func (h *latHist) add(ns int64) {
	us := float64(ns) / 1e3
	i := 0
	if us > 1 {
		i = min(int(math.Log(us)/logLatGrowth), latBuckets-1)
	}
	h.buckets[i].Add(1)
	h.n.Add(1)
}

// count is the number of latencies added.
func (h *latHist) count() int64 { return h.n.Load() }

// quantile returns the q-quantile in milliseconds over expected latencies, of which those
// never added (records that never arrived) count as infinitely late: +Inf when the quantile
// falls among them. expected below count() is taken as count().
func (h *latHist) quantile(q float64, expected int64) float64 {
	total := max(expected, h.count())
	if total == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(total)))
	rank = max(rank, 1)
	var seen int64
	for i := range h.buckets {
		seen += h.buckets[i].Load()
		if seen >= rank {
			return math.Pow(latGrowth, float64(i)+0.5) / 1e3 // the bucket's middle, ms
		}
	}
	return math.Inf(1)
}
