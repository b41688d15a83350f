package node

import (
	"context"
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of replicated topics, per raft group (label group: the topic, or "_meta" for the
// region's metadata group), at most Config.MaxSeriesPerMetric groups each. They are read
// from the status the observe loop keeps (every Raft.ObserveInterval), and, for follower
// lag, from the driver at scrape time.
var (
	raftLeaderDesc   = prometheus.NewDesc("quicmq_raft_group_leader", "1 when this node leads the raft group.", []string{"group"}, nil)
	raftTermDesc     = prometheus.NewDesc("quicmq_raft_group_term", "The raft group's current term as this node knows it.", []string{"group"}, nil)
	raftCommitDesc   = prometheus.NewDesc("quicmq_raft_group_commit_index", "The raft group's commit index on this node.", []string{"group"}, nil)
	raftAppliedDesc  = prometheus.NewDesc("quicmq_raft_group_applied_index", "The raft group's applied index on this node (records are served up to it).", []string{"group"}, nil)
	raftLagDesc      = prometheus.NewDesc("quicmq_raft_group_follower_lag_entries", "Entries a follower lacks of the leader's log, on the group's leader.", []string{"group", "peer"}, nil)
	raftBelowQuorumD = prometheus.NewDesc("quicmq_raft_groups_below_quorum", "Raft groups of this node without a known leader, or led here with fewer than a quorum of replicas reachable.", nil, nil)
	raftUnderReplD   = prometheus.NewDesc("quicmq_raft_groups_under_replicated", "Data raft groups led here with a replica this node cannot reach (a node down, or cut off): summed over a region's nodes, each group counts once, on its leader.", nil, nil)

	// Snapshots and catch-ups, for the node (the driver's counters, read at scrape time).
	raftSnapSentDesc    = prometheus.NewDesc("quicmq_raft_snapshots_sent_total", "Raft snapshots (metadata only) this node sent to a replica behind its compacted log.", nil, nil)
	raftSnapAppliedDesc = prometheus.NewDesc("quicmq_raft_snapshots_applied_total", "Raft snapshots this node installed.", nil, nil)
	raftCatchupsDesc    = prometheus.NewDesc("quicmq_raft_catchups_total", "Catch-ups (fetches of the records a snapshot needs from a peer's log) this node ended, by result.", []string{"result"}, nil)
	raftCatchupActDesc  = prometheus.NewDesc("quicmq_raft_catchups_active", "Catch-ups in progress on this node.", nil, nil)
	raftCatchupRecDesc  = prometheus.NewDesc("quicmq_raft_catchup_records_total", "Records this node fetched from peers' logs for catch-ups.", nil, nil)
	raftCatchupByteDesc = prometheus.NewDesc("quicmq_raft_catchup_bytes_total", "Bytes of record chunks this node fetched from peers' logs for catch-ups.", nil, nil)
	raftCatchupOthDesc  = prometheus.NewDesc("quicmq_raft_catchup_other_bytes_total", "Of quicmq_raft_catchup_bytes_total, the bytes fetched from a replica other than the group's leader that sent the snapshot (a catch-up reads from any replica that applied the records, the leader last).", nil, nil)

	// Proposals batched into shared raft entries (replica/batch.go).
	raftBatchedDesc      = prometheus.NewDesc("quicmq_raft_batched_entries_total", "Raft entries this node proposed carrying several proposals (publishes to any topics of one group, taken in one round).", nil, nil)
	raftRoundsDesc       = prometheus.NewDesc("quicmq_raft_rounds_total", "Rounds of this node's raft engine that handled at least one Ready (every group's Readys of a round share one Pebble batch).", nil, nil)
	raftSyncsDesc        = prometheus.NewDesc("quicmq_raft_syncs_total", "Synced Pebble commits and syncs of this node's raft rounds.", nil, nil)
	raftSyncWaitDesc     = prometheus.NewDesc("quicmq_raft_sync_wait_seconds_total", "Time this node's raft engine spent waiting for its rounds' syncs, during which it handles nothing else: its rate is the share of the engine the disk holds, over the rate of quicmq_raft_syncs_total a sync's mean latency.", nil, nil)
	raftBatchedPropsDesc = prometheus.NewDesc("quicmq_raft_batched_proposals_total", "Proposals carried by those entries: over quicmq_raft_batched_entries_total, the proposals per shared entry.", nil, nil)
)

// raftCollector exports the per-group gauges.
type raftCollector struct{ r *replicated }

func (c *raftCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{raftLeaderDesc, raftTermDesc, raftCommitDesc, raftAppliedDesc, raftLagDesc, raftBelowQuorumD, raftUnderReplD,
		raftSnapSentDesc, raftSnapAppliedDesc, raftCatchupsDesc, raftCatchupActDesc, raftCatchupRecDesc, raftCatchupByteDesc,
		raftCatchupOthDesc, raftBatchedDesc, raftBatchedPropsDesc, raftRoundsDesc, raftSyncsDesc, raftSyncWaitDesc} {
		ch <- d
	}
}

// Collect reads the raft groups' state once per scrape. Long by design: one series after
// another, in Describe's order.
func (c *raftCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.r
	max := r.n.cfg.MaxSeriesPerMetric
	r.mu.Lock()
	groups := make([]uint64, 0, len(r.mu.status))
	for g := range r.mu.status {
		groups = append(groups, g)
	}
	status := make(map[uint64]struct{ lead, term, commit, applied uint64 }, len(groups))
	for g, st := range r.mu.status {
		status[g] = struct{ lead, term, commit, applied uint64 }{st.Lead, st.GetTerm(), st.GetCommit(), st.Applied}
	}
	r.mu.Unlock()
	byGroup := make(map[uint64]*repTopic)
	r.pl.RLock()
	for id, g := range r.pl.groups {
		byGroup[id] = &repTopic{name: g.label, group: id, replicas: g.replicas}
	}
	r.pl.RUnlock()
	sort.Slice(groups, func(i, j int) bool { return groups[i] < groups[j] })
	below, under := 0, 0
	for i, g := range groups {
		st := status[g]
		if st.lead == 0 {
			below++
		} else if t := byGroup[g]; st.lead == r.id && t != nil {
			lack := len(r.lacking(t))
			if len(t.replicas)-lack < len(t.replicas)/2+1 {
				below++
			}
			if lack > 0 {
				under++
			}
		}
		if i >= max {
			continue
		}
		label := r.groupLabel(g)
		leader := 0.0
		if st.lead == r.id {
			leader = 1
		}
		ch <- prometheus.MustNewConstMetric(raftLeaderDesc, prometheus.GaugeValue, leader, label)
		ch <- prometheus.MustNewConstMetric(raftTermDesc, prometheus.GaugeValue, float64(st.term), label)
		ch <- prometheus.MustNewConstMetric(raftCommitDesc, prometheus.GaugeValue, float64(st.commit), label)
		ch <- prometheus.MustNewConstMetric(raftAppliedDesc, prometheus.GaugeValue, float64(st.applied), label)
		if st.lead != r.id {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.n.cfg.Raft.ObserveInterval)
		match, err := r.d.Progress(ctx, g)
		cancel()
		if err != nil || match == nil {
			continue
		}
		last := match[r.id]
		for id, m := range match {
			if id == r.id {
				continue
			}
			peer := ""
			if t := byGroup[g]; t != nil {
				peer = t.nameOf(id)
			}
			if peer == "" {
				peer = r.memberName(id)
			}
			lag := 0.0
			if last > m {
				lag = float64(last - m)
			}
			ch <- prometheus.MustNewConstMetric(raftLagDesc, prometheus.GaugeValue, lag, label, peer)
		}
	}
	ch <- prometheus.MustNewConstMetric(raftBelowQuorumD, prometheus.GaugeValue, float64(below))
	ch <- prometheus.MustNewConstMetric(raftUnderReplD, prometheus.GaugeValue, float64(under))
	ctx, cancel := context.WithTimeout(context.Background(), r.n.cfg.Raft.ObserveInterval)
	st, err := r.d.Stats(ctx)
	cancel()
	if err != nil {
		return
	}
	for _, m := range []struct {
		d *prometheus.Desc
		t prometheus.ValueType
		v uint64
		l []string
	}{
		{raftSnapSentDesc, prometheus.CounterValue, st.SnapshotsSent, nil},
		{raftSnapAppliedDesc, prometheus.CounterValue, st.SnapshotsApplied, nil},
		{raftCatchupsDesc, prometheus.CounterValue, st.CatchupsDone, []string{"done"}},
		{raftCatchupsDesc, prometheus.CounterValue, st.CatchupsFailed, []string{"failed"}},
		{raftCatchupActDesc, prometheus.GaugeValue, uint64(st.CatchupsActive), nil},
		{raftCatchupRecDesc, prometheus.CounterValue, st.CatchupRecords, nil},
		{raftCatchupByteDesc, prometheus.CounterValue, st.CatchupBytes, nil},
		{raftCatchupOthDesc, prometheus.CounterValue, st.CatchupOtherBytes, nil},
		{raftBatchedDesc, prometheus.CounterValue, st.Batched, nil},
		{raftBatchedPropsDesc, prometheus.CounterValue, st.BatchedProps, nil},
		{raftRoundsDesc, prometheus.CounterValue, st.Rounds, nil},
		{raftSyncsDesc, prometheus.CounterValue, st.SyncCommits, nil},
	} {
		ch <- prometheus.MustNewConstMetric(m.d, m.t, float64(m.v), m.l...)
	}
	ch <- prometheus.MustNewConstMetric(raftSyncWaitDesc, prometheus.CounterValue, st.SyncWait.Seconds())
}

// memberName is the region node advertising raft ID id ("" if none).
func (r *replicated) memberName(id uint64) string {
	for _, m := range r.raftMembers() {
		if m.id == id {
			return m.name
		}
	}
	return ""
}

// electionCounter counts the leader changes this node observed, per group, capped.
type electionCounter struct {
	vec *prometheus.CounterVec
	max int
	mu  sync.Mutex
	n   map[string]bool
}

func newElectionCounter(reg prometheus.Registerer, max int) *electionCounter {
	c := &electionCounter{
		vec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quicmq_raft_elections_total",
			Help: "Leader changes (a new leader in a later term) this node observed in the raft group.",
		}, []string{"group"}),
		max: max, n: make(map[string]bool),
	}
	reg.MustRegister(c.vec)
	return c
}

func (c *electionCounter) inc(group string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.n[group] && len(c.n) >= c.max {
		return
	}
	c.n[group] = true
	c.vec.WithLabelValues(group).Inc()
}
