package subscriptions

import (
	"context"
	"log/slog"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicmq/quicmq/federation"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/placement"
	"github.com/quicmq/quicmq/node/tail"
	"github.com/quicmq/quicmq/routing"
	"github.com/quicmq/quicmq/wal"
)

// Region is where the node's region keeps a topic, as a subscription needs it: which node
// serves a client's subscription to it, whether that has changed, and where a durable
// stores its positions. The node picks one implementation at start-up (node/subhost.go):
// SingleCopy (Config.Replicas 1: one owner per topic, placement's rendezvous hashing) or
// the replicated one over its raft groups (Replicas > 1). No call site here asks which.
type Region interface {
	// Owner is the node a client's subscription to the literal topic is served by: "" for
	// this node. A replicated topic is read from any replica and a durable consumer served
	// by its leader; a single-copy topic by its owner.
	Owner(ctx context.Context, topic string, durable bool) (string, *wire.Error)
	// Moved is nil while owner (from Owner) still serves such a subscription to topic, else
	// the error that ends it, so that the client subscribes again and is sent to the new one.
	Moved(topic, owner string, durable bool) *wire.Error
	// Spread reports whether topics are spread over the region's nodes, so that a client's
	// wildcard gathers the other nodes' topics too: false without gossip, and in a
	// replicated region whose every node holds every topic.
	Spread() bool
	// IsReplicated reports whether topic's log is a replicated one: a durable's position
	// there is stored through raft (SetPosition), not in this node's log.
	IsReplicated(topic string) bool
	// PositionBarrier returns once this node has applied what topic's group committed
	// before, so that durable's positions read here are current; at once for a topic that
	// is not replicated.
	PositionBarrier(ctx context.Context, durable, topic string) *wire.Error
	// SetPosition stores durable's position on the replicated topic (with its vector)
	// through raft.
	SetPosition(ctx context.Context, durable, topic string, off uint64, vec map[string]uint64) *wire.Error
}

// HostConfig is what the node hands the subscriptions: its settings, its log, the shared
// tails, where the region keeps its topics, and (in a mesh) placement and the links.
type HostConfig struct {
	Name, Region string
	ReadAhead    int         // bytes a subscription reads ahead per cursor and round (node.Config.ReadAhead)
	Limits       wire.Limits // for decoding what upstreams send
	Log          *slog.Logger
	WAL          *wal.Log
	Tails        *tail.Set
	Place        *placement.Table       // nil without gossip
	Fed          *federation.Federation // nil without gossip
	Topics       Region                 // where the region keeps a topic: SingleCopy, or its replicated topics
	Metrics      *Metrics
	// Interest maps patterns to the subscriptions that want to hear of new topics (the node's
	// topic watcher calls NotifyNewTopic on them); Wild, the wildcard subscriptions that
	// read by sweep (the node hands Wild.Advanced to wal.Log.OnAdvance).
	Interest *routing.Table[*Subscription]
	Wild     *WildSet
}

// Host is the node as its subscriptions see it, and the table of live subscriptions. Its
// fields are fixed once made; the table is under its mutex. Safe for concurrent use.
type Host struct {
	cfg struct {
		Name, Region string
		ReadAhead    int
	}
	limits   wire.Limits
	log      *slog.Logger
	wal      *wal.Log
	tails    *tail.Set
	place    *placement.Table
	fed      *federation.Federation
	topics   Region
	metrics  *Metrics
	interest *routing.Table[*Subscription]
	wild     *WildSet

	mu struct {
		sync.Mutex
		live map[*Subscription]struct{}
	}
}

// NewHost makes the subscriptions' view of a node from c.
func NewHost(c HostConfig) *Host {
	h := &Host{limits: c.Limits, log: c.Log, wal: c.WAL, tails: c.Tails, place: c.Place, fed: c.Fed, topics: c.Topics,
		metrics: c.Metrics, interest: c.Interest, wild: c.Wild}
	h.cfg.Name, h.cfg.Region, h.cfg.ReadAhead = c.Name, c.Region, c.ReadAhead
	h.mu.live = make(map[*Subscription]struct{})
	return h
}

func (h *Host) add(s *Subscription) {
	h.mu.Lock()
	h.mu.live[s] = struct{}{}
	h.mu.Unlock()
}

// Remove takes s out of the live subscriptions (Live): a durable's subscription leaves before
// its stream ends (node/subscribe.go), the rest when Serve returns.
func (h *Host) Remove(s *Subscription) {
	h.mu.Lock()
	delete(h.mu.live, s)
	h.mu.Unlock()
}

// Live is the subscriptions being served.
func (h *Host) Live() []*Subscription {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*Subscription, 0, len(h.mu.live))
	for s := range h.mu.live {
		out = append(out, s)
	}
	return out
}

// Metrics are the subscription streams' metrics, on the registerer the node gives.
type Metrics struct {
	subscriptions   prometheus.Gauge
	subscribeErrors *prometheus.CounterVec
	sub             subMetrics
}

// NewMetrics makes the per-stream series of the subscriptions and registers them on reg;
// maxSeries caps the distinct (pattern, subscription) label sets (node.Config.MaxSeriesPerMetric).
// open and errors are the node's, shared with its other subscription streams (group
// members, pass-throughs): open streams, and subscriptions refused or ended by an error.
func NewMetrics(reg prometheus.Registerer, maxSeries int, open prometheus.Gauge, errors *prometheus.CounterVec) *Metrics {
	labels := []string{"pattern", "subscription"}
	m := &Metrics{
		subscriptions:   open,
		subscribeErrors: errors,
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
	reg.MustRegister(m.sub.records, m.sub.bytes, m.sub.acks, m.sub.blocked, m.sub.streams)
	return m
}

// Refused counts a subscription refused or ended with e (quicmq_subscribe_errors_total).
func (m *Metrics) Refused(e *wire.Error) {
	m.subscribeErrors.WithLabelValues(strconv.FormatUint(uint64(e.Code), 10)).Inc()
}
