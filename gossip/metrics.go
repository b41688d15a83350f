package gossip

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the package's series on the configured registerer. Label values are bounded:
// pool is "lan" or "wan", status and kind are the few Status and EventKind names. A nil
// *metrics (no registerer) records nothing.
type metrics struct {
	members *prometheus.GaugeVec
	events  *prometheus.CounterVec
	drops   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &metrics{
		members: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "quicmq_gossip_members",
			Help: "Members in this node's view of a gossip pool, by status (the node itself included)."},
			[]string{"pool", "status"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quicmq_gossip_events_total",
			Help: "Member events received from a gossip pool, by kind (join, leave, fail, update, reap)."},
			[]string{"pool", "kind"}),
		drops: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "quicmq_gossip_subscriber_drops_total",
			Help: "Member events not delivered to a subscriber whose channel was full (the member table is still right)."}),
	}
	var err error
	m.members = register(reg, m.members, &err)
	m.events = register(reg, m.events, &err)
	m.drops = register(reg, m.drops, &err)
	if err != nil {
		return nil, fmt.Errorf("gossip: metrics: %w", err)
	}
	return m, nil
}

// register registers c, or reuses the collector already registered under the same
// descriptor (a node that restarts its gossip on the same registry).
func register[C prometheus.Collector](reg prometheus.Registerer, c C, errp *error) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		*errp = errors.Join(*errp, err)
	}
	return c
}

func (m *metrics) event(pool Pool, kind EventKind) {
	if m != nil {
		m.events.WithLabelValues(pool.String(), kind.String()).Inc()
	}
}

func (m *metrics) drop() {
	if m != nil {
		m.drops.Inc()
	}
}

// setMembers recounts one pool's table. Called by the goroutine that changed it, with the
// table's lock held.
func (m *metrics) setMembers(pool Pool, table map[string]Member) {
	if m == nil {
		return
	}
	var counts [StatusFailed + 1]int
	for _, mem := range table {
		if mem.Status >= 0 && mem.Status <= StatusFailed {
			counts[mem.Status]++
		}
	}
	for s := StatusAlive; s <= StatusFailed; s++ {
		m.members.WithLabelValues(pool.String(), s.String()).Set(float64(counts[s]))
	}
}
