package manage

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quicmq/quicmq/internal/wire"
)

// consumerCollector reports each consumer's backlog and the age of its last stored
// position when scraped, from the log: so the series exist while no member is connected,
// which is when a backlog grows unseen. Durable consumers and consumer groups both: labels
// are the tenant ("" for a client without one), the consumer's name in it and its kind
// ("durable" or "group": two values, so the cap below still bounds the series). Past
// MaxSeriesPerMetric consumers (in name order) the rest are summed under tenant, name and
// kind "_other", and counted by quicmq_consumer_series_overflow. A scrape costs one pass
// over the consumers' stored positions, selected by name (wal.Positions with the mirror
// cursors skipped unread: nothing per mirrored topic), and one over the stored group states
// (bounded by each group's window).
type consumerCollector struct {
	list                     func() ([]Consumer, *wire.Error)
	now                      func() time.Time
	maxSeries                int
	log                      *slog.Logger
	pending, ackAge, overflw *prometheus.Desc
}

// NewCollector is the consumers' Prometheus collector: list lists every consumer of the
// node (nil, nil while it has no log), now is the node's clock, maxSeries its
// MaxSeriesPerMetric; a failed listing is logged to log and skips the scrape.
func NewCollector(list func() ([]Consumer, *wire.Error), now func() time.Time, maxSeries int, log *slog.Logger) prometheus.Collector {
	labels := []string{"tenant", "name", "kind"}
	return &consumerCollector{
		list: list, now: now, maxSeries: maxSeries, log: log,
		pending: prometheus.NewDesc("quicmq_consumer_pending_records",
			"Records of its topics a consumer has not acknowledged, stored on this node (a durable: head - resume point; a group: records never handed out plus those outstanding); also while no member is connected.",
			labels, nil),
		ackAge: prometheus.NewDesc("quicmq_consumer_last_ack_age_seconds",
			"Seconds since a consumer's last position or group state was stored on this node (an ACK or a reset); absent when the time is unknown.",
			labels, nil),
		overflw: prometheus.NewDesc("quicmq_consumer_series_overflow",
			"Consumers past MaxSeriesPerMetric, counted under tenant, name and kind \"_other\" at this scrape.", nil, nil),
	}
}

func (c *consumerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pending
	ch <- c.ackAge
	ch <- c.overflw
}

func (c *consumerCollector) Collect(ch chan<- prometheus.Metric) {
	cs, e := c.list()
	if e != nil {
		c.log.Warn("consumer metrics: listing failed", "err", e)
		return
	}
	now := c.now()
	var otherPending, otherAge float64
	other, hasOther := 0, false
	for i, cons := range cs {
		age, aged := 0.0, !cons.LastAck.IsZero()
		if aged {
			age = max(now.Sub(cons.LastAck).Seconds(), 0)
		}
		if i >= c.maxSeries {
			other++
			otherPending += float64(cons.Pending)
			if aged {
				otherAge, hasOther = max(otherAge, age), true
			}
			continue
		}
		tenant, name := SplitConsumer(cons.Name)
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(cons.Pending), tenant, name, cons.Kind)
		if aged {
			ch <- prometheus.MustNewConstMetric(c.ackAge, prometheus.GaugeValue, age, tenant, name, cons.Kind)
		}
	}
	if other > 0 {
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, otherPending, "_other", "_other", "_other")
		if hasOther {
			ch <- prometheus.MustNewConstMetric(c.ackAge, prometheus.GaugeValue, otherAge, "_other", "_other", "_other")
		}
	}
	ch <- prometheus.MustNewConstMetric(c.overflw, prometheus.GaugeValue, float64(other))
}
