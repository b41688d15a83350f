package replica

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"testing/cryptotest"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/quicmq/quicmq/wal"
	"go.etcd.io/raft/v3"
)

// The deterministic simulation: N replicas of G groups in one process, each
// with its engine and Pebble on a crash-simulating FS, over a simulated
// network with seeded drops, delays (hence reorders), partitions and
// crash-restarts, on a virtual clock. Invariants are checked after every
// step. Rerun one seed with -seed N (or QUICMQ_SIM_SEED=N); run many with
// QUICMQ_SIM_SEEDS=5000.

var simSeedFlag = flag.Int64("seed", -1, "run the replica simulation for this seed only")

type simConfig struct {
	nodes, groups int
	steps         int     // fault phase, virtual milliseconds
	healSteps     int     // bound of the phase that must converge
	tickEvery     int     // virtual ms per raft tick
	maxDelay      int     // ms
	dropRate      float64 // per message batch
	dupRate       float64 // per message batch
	proposeRate   float64 // per step
	crashRate     float64 // per step
	partitionRate float64 // per step
	broken        bool    // apply before commit
	brokenNoSync  bool    // never sync
	brokenCatchup bool    // install snapshots without fetching their records
	maxSizePerMsg uint64  // raft's paging of appends (0: the default)
	maxInflight   int     // raft's appends in flight per follower (0: the default)
	compact       bool    // Config.LogCompaction, every 8 applied entries
	logTail       uint64  // Config.LogTailEntries with compact (0: 4): a follower further behind needs a snapshot
	wal           bool    // WalSM on a wal.Log instead of LogSM (walsm_sim_test.go)
	dedupWindow   int     // WalSM's window, with wal
	wipe          bool    // once in the fault phase, a node's storage is lost: it restarts empty under a new ID and rejoins
	truncate      bool    // with wal: some proposals cut a topic's log (EntryTruncate: retention or a purge)
	topics        int     // with wal: topics per group, each a log of its own offsets (0: one)
	batch         bool    // proposals come in bursts of 1-6 from one node, each group's as one batch entry (batch.go)
}

func defaultSimConfig(nodes int) simConfig {
	return simConfig{
		nodes: nodes, groups: 2, steps: 2000, healSteps: 6000, tickEvery: 10, maxDelay: 12,
		dropRate: 0.05, dupRate: 0.02, proposeRate: 0.15, crashRate: 0.002, partitionRate: 0.002,
	}
}

type simNode struct {
	id      uint64
	fs      *vfs.MemFS
	db      *pebble.DB
	sm      *LogSM     // without cfg.wal
	log     *wal.Log   // with cfg.wal: the node's log, whose DB is db
	wsm     *WalSM     // with cfg.wal
	e       *engine    // nil while down
	st      []*Storage // per group, readable while down too
	skew    int64
	phase   int
	downTil int
	join    bool // restarted empty after a wipe: its groups are joined, never bootstrapped
}

type simPacket struct {
	at       int
	seq      uint64
	from, to uint64
	msgs     []Message
}

type simRec struct {
	index  uint64
	time   int64
	data   string
	unseen bool // with truncate: cut before any replica's log was checked there (filled in by the first that shows it)
}

type simEntry struct {
	term uint64
	data string
}

type simAck struct {
	group  uint64
	offset uint64
	index  uint64
	data   string
}

type sim struct {
	cfg    simConfig
	seed   uint64
	rng    *rand.Rand
	now    int
	nodes  []*simNode
	groups []uint64
	// logs are the offset spaces the checks follow: a group's (LogSM, or WalSM with one
	// topic), or each topic's of a group holding several (logGroup).
	logs   []uint64
	net    []simPacket
	pseq   uint64
	cut    map[[2]uint64]bool // directional: from -> to dropped
	healAt int

	leaders map[[2]uint64]uint64  // (group, term) -> leader
	global  map[uint64][]simRec   // group -> the longest applied log seen
	checked map[[2]uint64]uint64  // (node, group) -> offsets compared
	commits map[uint64][]simEntry // group -> committed raft entries seen (index i at i-1)
	ccheck  map[[2]uint64]uint64  // (node, group) -> committed index compared
	firstAt map[[2]uint64]uint64  // with truncate: (group, applied index) -> the topic's log start there
	acked   []simAck
	props   int
	retries []simRetry // with cfg.wal: recent keyed proposals, proposed again
	err     error
	stats   simStats
	onSend  func(from, to uint64, msgs []Message) // tests' observer

	wipeAt   int          // with cfg.wipe: when the node is wiped
	replaces []simReplace // wiped nodes: old ID -> new ID
	// ghosts are the wiped nodes' storage as it was durably when lost
	// (synced data only), for onAck's quorum check: an entry committed just
	// before the wipe was durable on that quorum.
	ghosts []*simNode
	// fetches are the catch-ups in progress, run over the simulated network
	// (a chunk per delivery delay, lost with the link, the source or the
	// fetching node).
	fetches []*simFetch
}

// simFetch is one catch-up's fetch: the chunks of its spans, read from the
// source node's state machine and written into the fetching engine.
type simFetch struct {
	n    *simNode
	e    *engine // the engine that started it: gone when the node restarts
	cu   *catchup
	span int
	src  int // index in cu.sources
	next uint64
	at   int
}

// simReplace is a wiped node's replacement in every group, driven by
// ReplaceStep as the node layer does.
type simReplace struct {
	old, new uint64
	done     map[uint64]bool // group -> replaced
}

// simStats counts what a run exercised, so that a test can show the faults
// and paths it claims to cover did happen.
type simStats struct {
	crashes, partitions, leaderTerms, quiesced, clamped, notLeader, dropped int
	duplicates                                                              int // with wal: retries answered with the original offset
	compacted                                                               int // groups whose log was compacted on some node at the end
	wipes, learners, promotions                                             int // with wipe: nodes wiped, learners added, promotions proposed
	snapshots, catchups, catchupFails, fetchedRecords                       int // snapshots installed, catch-ups done and failed, records fetched
	otherSource                                                             int // chunks fetched from a replica other than the snapshot's sender
	cuts, startedPast0                                                      int // with truncate: cuts applied; logs checked with a start past 0
	batches                                                                 int // with batch: entries proposed carrying several proposals
}

func (a *simStats) add(b simStats) {
	a.crashes += b.crashes
	a.partitions += b.partitions
	a.leaderTerms += b.leaderTerms
	a.quiesced += b.quiesced
	a.clamped += b.clamped
	a.notLeader += b.notLeader
	a.dropped += b.dropped
	a.duplicates += b.duplicates
	a.compacted += b.compacted
	a.wipes += b.wipes
	a.learners += b.learners
	a.promotions += b.promotions
	a.snapshots += b.snapshots
	a.catchups += b.catchups
	a.catchupFails += b.catchupFails
	a.otherSource += b.otherSource
	a.fetchedRecords += b.fetchedRecords
	a.cuts += b.cuts
	a.startedPast0 += b.startedPast0
	a.batches += b.batches
}

type simTransport struct {
	s    *sim
	from uint64
}

func (t simTransport) Send(to uint64, msgs []Message) {
	s := t.s
	if s.onSend != nil {
		s.onSend(t.from, to, msgs)
	}
	if s.cut[[2]uint64{t.from, to}] || s.rng.Float64() < s.cfg.dropRate {
		return
	}
	// Through the wire form, as a real transport delivers them.
	b, err := EncodeBatch(nil, t.from, to, msgs)
	if err != nil {
		s.err = err
		return
	}
	from, dest, cp, err := DecodeBatch(b)
	if err != nil || from != t.from || dest != to || len(cp) != len(msgs) {
		s.err = fmt.Errorf("batch from %d to %d did not survive its wire form: %d of %d messages, %v", t.from, to, len(cp), len(msgs), err)
		return
	}
	s.pseq++
	s.net = append(s.net, simPacket{at: s.now + 1 + s.rng.IntN(s.cfg.maxDelay), seq: s.pseq, from: t.from, to: to, msgs: cp})
	if s.rng.Float64() < s.cfg.dupRate {
		// Delivered twice, the second time later: raft must ignore it.
		s.pseq++
		s.net = append(s.net, simPacket{at: s.now + 1 + s.rng.IntN(4*s.cfg.maxDelay), seq: s.pseq, from: t.from, to: to, msgs: cp})
	}
}

func newSim(cfg simConfig, seed uint64) (*sim, error) {
	s := &sim{
		cfg: cfg, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x5eed)),
		cut: map[[2]uint64]bool{}, leaders: map[[2]uint64]uint64{}, global: map[uint64][]simRec{},
		checked: map[[2]uint64]uint64{}, commits: map[uint64][]simEntry{}, ccheck: map[[2]uint64]uint64{},
		firstAt: map[[2]uint64]uint64{},
	}
	if cfg.wipe {
		s.wipeAt = 1 + s.rng.IntN(cfg.steps)
	}
	for g := range cfg.groups {
		s.groups = append(s.groups, uint64(100+g))
		if !cfg.wal || cfg.topics <= 1 {
			s.logs = append(s.logs, uint64(100+g))
			continue
		}
		for t := range cfg.topics {
			s.logs = append(s.logs, uint64(100+g)*simTopicsMax+uint64(t))
		}
	}
	for i := range cfg.nodes {
		n := &simNode{id: uint64(i + 1), fs: vfs.NewCrashableMem(), skew: s.rng.Int64N(1000e6) - 500e6, phase: s.rng.IntN(cfg.tickEvery)}
		s.nodes = append(s.nodes, n)
		if err := s.openDB(n); err != nil {
			return nil, err
		}
	}
	for _, n := range s.nodes {
		if err := s.start(n); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// node returns the node running under raft ID id (nil: none, as for a
// wiped node's old ID).
func (s *sim) node(id uint64) *simNode {
	for _, n := range s.nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

func (s *sim) peers() []uint64 {
	var p []uint64
	for _, n := range s.nodes {
		p = append(p, n.id)
	}
	return p
}

func (s *sim) openDB(n *simNode) error {
	if s.cfg.wal {
		if err := s.openWal(n); err != nil {
			return err
		}
	} else {
		db, err := pebble.Open("db", &pebble.Options{FS: n.fs, FormatMajorVersion: pebble.FormatNewest, Logger: quietLogger{}})
		if err != nil {
			return fmt.Errorf("node %d: open pebble: %w", n.id, err)
		}
		n.db = db
	}
	db := n.db
	n.st = nil
	st := NewStore(db)
	for _, g := range s.groups {
		gs, err := st.Group(g)
		if err != nil {
			return err
		}
		n.st = append(n.st, gs)
	}
	return nil
}

func (s *sim) start(n *simNode) error {
	sm, err := s.newSM(n)
	if err != nil {
		return err
	}
	cfg := Config{
		NodeID: n.id, DB: n.db, StateMachine: sm, Transport: simTransport{s, n.id},
		ElectionTicks: 10, HeartbeatTicks: 1, MaxSizePerMsg: s.cfg.maxSizePerMsg, MaxInflightMsgs: s.cfg.maxInflight,
		Now:           func() time.Time { return time.Unix(0, int64(s.now)*1e6+n.skew) },
		LogCompaction: s.cfg.compact, LogCompactEvery: 8, LogTailEntries: cmp.Or(s.cfg.logTail, 4),
		brokenApplyBeforeCommit: s.cfg.broken,
		brokenNoSync:            s.cfg.brokenNoSync,
		brokenSkipCatchup:       s.cfg.brokenCatchup,
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	n.e = newEngine(cfg.withDefaults())
	for i, g := range s.groups {
		if _, err := n.e.addGroup(g, s.peers(), n.join); err != nil {
			return fmt.Errorf("node %d: %w", n.id, err)
		}
		n.st[i] = n.e.groups[g].st
	}
	for _, l := range s.logs {
		next := s.next(n, l)
		k := [2]uint64{n.id, l}
		s.checked[k] = min(s.checked[k], next)
	}
	return nil
}

// crash drops what the node had not synced and keeps it down for a while;
// its storage stays readable for the quorum check.
func (s *sim) crash(n *simNode) error {
	s.harvest(n)
	crashed := n.fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: s.rng.IntN(60), RNG: rand.New(rand.NewPCG(s.rng.Uint64(), 1))})
	s.closeDB(n)
	n.fs = crashed
	n.e = nil
	n.sm, n.wsm = nil, nil
	s.stats.crashes++
	n.downTil = s.now + 20 + s.rng.IntN(400)
	return s.openDB(n)
}

// wipe loses the node's whole storage: it restarts empty under a new raft
// ID (IDs are never reused) and joins its groups, whose leaders replace its
// old ID by the new one (replace).
func (s *sim) wipe(n *simNode) error {
	s.harvest(n)
	ghost := &simNode{id: n.id, fs: n.fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0, RNG: rand.New(rand.NewPCG(s.rng.Uint64(), 1))})}
	if err := s.openDB(ghost); err != nil {
		return fmt.Errorf("wiped node %d: %w", n.id, err)
	}
	s.ghosts = append(s.ghosts, ghost)
	s.closeDB(n)
	old := n.id
	n.fs = vfs.NewCrashableMem()
	n.id = 1000 + uint64(len(s.replaces))
	n.join = true
	n.e = nil
	n.sm, n.wsm = nil, nil
	n.downTil = s.now + 20 + s.rng.IntN(400)
	s.stats.wipes++
	s.replaces = append(s.replaces, simReplace{old: old, new: n.id, done: map[uint64]bool{}})
	return s.openDB(n)
}

// replace drives, on each group's leader, the replacement of every wiped
// node's old ID by its new one, one ReplaceStep at a time, and checks that
// a promotion never makes a voter of a member whose durable log is behind
// the leader's commit index (I8).
func (s *sim) replace() error {
	for i := range s.replaces {
		rp := &s.replaces[i]
		for _, g := range s.groups {
			if rp.done[g] {
				continue
			}
			for _, n := range s.nodes {
				if n.e == nil {
					continue
				}
				m, _ := n.e.membership(g)
				state, cc := ReplaceStep(m, rp.old, rp.new, 0)
				switch state {
				case ReplaceDone:
					rp.done[g] = true
				case ReplaceAddLearner:
					s.stats.learners++
				case ReplacePromote:
					j := s.node(rp.new)
					last, _ := j.st[slices.Index(s.groups, g)].LastIndex()
					if last < m.Status.GetCommit() {
						return fmt.Errorf("group %d: node %d promotes %d (replacing %d) whose log ends at %d, before the commit index %d",
							g, n.id, rp.new, rp.old, last, m.Status.GetCommit())
					}
					s.stats.promotions++
				}
				if cc != nil {
					if err := n.e.proposeConfChange(g, cc); err != nil {
						return fmt.Errorf("node %d group %d: %w", n.id, g, err)
					}
				}
			}
		}
	}
	return nil
}

// checkMembers: no voter set of any node ever holds a wiped node's old ID
// beside its new one (one replica, two votes).
func (s *sim) checkMembers(n *simNode, g uint64) error {
	m, _ := n.e.membership(g)
	for _, rp := range s.replaces {
		for _, set := range [][]uint64{m.Voters, m.Outgoing} {
			if slices.Contains(set, rp.old) && slices.Contains(set, rp.new) {
				return fmt.Errorf("node %d group %d: voters %v hold both %d and its replacement %d", n.id, g, set, rp.old, rp.new)
			}
		}
	}
	return nil
}

func (s *sim) run() error {
	for s.now = 1; s.now <= s.cfg.steps+s.cfg.healSteps; s.now++ {
		faults := s.now <= s.cfg.steps
		if err := s.step(faults); err != nil {
			return s.fail(err)
		}
		if !faults && s.converged() {
			return s.finalCheck()
		}
	}
	return s.fail(errors.New("no convergence after the faults stopped (liveness)"))
}

func (s *sim) fail(err error) error {
	return fmt.Errorf("seed %d, nodes %d, t=%dms: %w", s.seed, s.cfg.nodes, s.now, err)
}

func (s *sim) step(faults bool) error {
	// Restarts and healing.
	for _, n := range s.nodes {
		if n.e == nil && (s.now >= n.downTil || !faults) {
			if err := s.start(n); err != nil {
				return err
			}
		}
	}
	if len(s.cut) > 0 && (s.now >= s.healAt || !faults) {
		clear(s.cut)
	}
	// Deliveries due now, in order of due time then sending order.
	slices.SortStableFunc(s.net, func(a, b simPacket) int {
		if a.at != b.at {
			return a.at - b.at
		}
		return cmp.Compare(a.seq, b.seq)
	})
	i := 0
	for ; i < len(s.net) && s.net[i].at <= s.now; i++ {
		p := s.net[i]
		if n := s.node(p.to); n != nil && n.e != nil && !s.cut[[2]uint64{p.from, p.to}] {
			n.e.step(p.msgs)
		}
	}
	s.net = s.net[i:]
	if err := s.runFetches(); err != nil {
		return err
	}
	for _, n := range s.nodes {
		if n.e != nil && (s.now+n.phase)%s.cfg.tickEvery == 0 {
			q := n.e.stats.Quiesced
			n.e.tick()
			if n.e.stats.Quiesced > q {
				s.stats.quiesced++
			}
		}
	}
	if faults {
		if s.rng.Float64() < s.cfg.crashRate {
			n := s.nodes[s.rng.IntN(len(s.nodes))]
			if s.rng.IntN(2) == 0 {
				n = s.leaderOrAny(s.groups[s.rng.IntN(len(s.groups))], n) // leaders are the interesting victims
			}
			if n.e != nil {
				if err := s.crash(n); err != nil {
					return err
				}
			}
		}
		if len(s.cut) == 0 && s.rng.Float64() < s.cfg.partitionRate {
			s.partition()
		}
		if s.now == s.wipeAt {
			if err := s.wipe(s.nodes[s.rng.IntN(len(s.nodes))]); err != nil {
				return err
			}
		}
	}
	if err := s.replace(); err != nil {
		return err
	}
	// Bursts of proposals with idle gaps, so that groups also quiesce (and
	// must wake again).
	rate := s.cfg.proposeRate
	if (s.now/400)%2 == 1 {
		rate = 0
	}
	if !faults {
		rate = s.cfg.proposeRate / 4
	}
	if s.rng.Float64() < rate {
		s.propose()
	}
	for _, n := range s.nodes {
		if n.e != nil {
			if err := n.e.process(); err != nil {
				return fmt.Errorf("node %d: %w", n.id, err)
			}
			for _, cu := range n.e.takeFetches() {
				s.fetches = append(s.fetches, &simFetch{n: n, e: n.e, cu: cu, next: cu.spans[0].From, at: s.now + 1 + s.rng.IntN(s.cfg.maxDelay)})
			}
		}
	}
	if s.err != nil {
		return s.err
	}
	return s.check()
}

// leaderOrAny returns the node leading g, or fallback when none does.
func (s *sim) leaderOrAny(g uint64, fallback *simNode) *simNode {
	for _, n := range s.nodes {
		if n.e != nil {
			if bs, _ := n.e.status(g); bs.RaftState == raft.StateLeader {
				return n
			}
		}
	}
	return fallback
}

// partition isolates one node, or splits the nodes in two, both ways, or
// (sometimes) one way only.
func (s *sim) partition() {
	perm := s.rng.Perm(len(s.nodes))
	k := 1 + s.rng.IntN(len(s.nodes)/2)
	side := map[uint64]bool{}
	for _, i := range perm[:k] {
		side[s.nodes[i].id] = true
	}
	s.stats.partitions++
	oneWay := s.rng.IntN(4) == 0
	for _, a := range s.nodes {
		for _, b := range s.nodes {
			if side[a.id] && !side[b.id] {
				s.cut[[2]uint64{a.id, b.id}] = true
				if !oneWay {
					s.cut[[2]uint64{b.id, a.id}] = true
				}
			}
		}
	}
	s.healAt = s.now + 50 + s.rng.IntN(600)
}

func (s *sim) propose() {
	n := s.nodes[s.rng.IntN(len(s.nodes))]
	if n.e == nil {
		return
	}
	if !s.cfg.batch {
		l := s.logs[s.rng.IntN(len(s.logs))]
		prop, done := s.proposal(n, l)
		n.e.propose(logGroup(l), prop, done)
		return
	}
	// A burst, as a round takes the proposals queued while the last one synced: each
	// group's in one entry (proposeBatch), groups in the order of their first proposal.
	var order []uint64
	byGroup := map[uint64][]queuedProposal{}
	for range 1 + s.rng.IntN(6) {
		l := s.logs[s.rng.IntN(len(s.logs))]
		prop, done := s.proposal(n, l)
		g := logGroup(l)
		if _, ok := byGroup[g]; !ok {
			order = append(order, g)
		}
		byGroup[g] = append(byGroup[g], queuedProposal{group: g, data: prop, done: done})
	}
	for _, g := range order {
		if len(byGroup[g]) > 1 {
			s.stats.batches++
		}
		n.e.proposeBatch(g, byGroup[g])
	}
}

// proposal returns the next proposal to log l from node n, and what checks its outcome.
func (s *sim) proposal(n *simNode, l uint64) ([]byte, func(Result, error)) {
	s.props++
	data := fmt.Sprintf("p%d@%d", s.props, n.id)
	prop := []byte(data)
	if s.cfg.wal {
		data, prop = s.walProposal(n, l, data)
	}
	node := n
	return prop, func(r Result, err error) {
		if err == nil && s.cfg.wal {
			r, err = s.walOutcome(r)
		}
		switch {
		case err == nil:
			s.onAck(node, l, data, r)
		case errors.Is(err, ErrNotLeader):
			s.stats.notLeader++
		case errors.Is(err, ErrDropped):
			s.stats.dropped++
		case errors.Is(err, errSimCut):
			s.stats.cuts++
		}
	}
}

// onAck checks an acknowledged proposal: its entry is durable on a quorum,
// and nothing else was ever seen at its offset.
func (s *sim) onAck(n *simNode, g uint64, data string, r Result) {
	gi := slices.Index(s.groups, logGroup(g)) // g: the log, a topic of a group with several
	term, err := n.st[gi].Term(r.Index)
	if err != nil {
		s.err = fmt.Errorf("node %d acknowledged %q at index %d, which it does not hold: %v", n.id, data, r.Index, err)
		return
	}
	have := 0
	for _, m := range append(slices.Clone(s.nodes), s.ghosts...) {
		if t, err := m.st[gi].Term(r.Index); err == nil && t == term {
			have++
		}
	}
	if have < len(s.nodes)/2+1 {
		var detail []string
		for _, m := range s.nodes {
			t, err := m.st[gi].Term(r.Index)
			l, _ := m.st[gi].LastIndex()
			detail = append(detail, fmt.Sprintf("node %d: last %d, term %d %v", m.id, l, t, err))
		}
		s.err = fmt.Errorf("node %d acknowledged %q (group %d, index %d, term %d, offset %d) held durably by %d of %d nodes: %v",
			n.id, data, g, r.Index, term, r.Offset, have, len(s.nodes), detail)
		return
	}
	if gl := s.global[g]; r.Offset < uint64(len(gl)) && !gl[r.Offset].unseen && gl[r.Offset].data != data {
		s.err = fmt.Errorf("node %d acknowledged %q at offset %d of group %d where %q was applied", n.id, data, r.Offset, g, gl[r.Offset].data)
		return
	}
	s.acked = append(s.acked, simAck{group: g, offset: r.Offset, index: r.Index, data: data})
}

// check verifies the invariants after a step: one leader per term; every
// node's applied log a prefix of the longest (same entry, offset and time
// at every offset, offsets dense); timestamps never decreasing.
func (s *sim) check() error {
	for _, n := range s.nodes {
		if n.e == nil {
			continue
		}
		for _, g := range s.groups {
			bs, _ := n.e.status(g)
			if bs.RaftState == raft.StateLeader {
				k := [2]uint64{g, bs.GetTerm()}
				l, ok := s.leaders[k]
				if ok && l != n.id {
					return fmt.Errorf("group %d has two leaders in term %d: nodes %d and %d", g, bs.GetTerm(), l, n.id)
				}
				if !ok {
					s.stats.leaderTerms++
				}
				s.leaders[k] = n.id
			}
			if len(s.replaces) > 0 { // nothing to compare before a wipe (membership asks raft for its whole Status)
				if err := s.checkMembers(n, g); err != nil {
					return err
				}
			}
			if err := s.checkCommitted(n, g); err != nil {
				return err
			}
			for _, l := range s.logs {
				if logGroup(l) != g {
					continue
				}
				if err := s.checkLog(n, l); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// checkCommitted compares every node's raft log up to its commit index with
// what the other nodes committed: no two nodes commit different entries at
// one index (raft's entries, empty ones and all, not only records).
func (s *sim) checkCommitted(n *simNode, g uint64) error {
	k := [2]uint64{n.id, g}
	st := n.st[slices.Index(s.groups, g)]
	// The stored HardState's commit, read in place: InitialState clones the
	// HardState and ConfState, and this runs for every node and group every step.
	st.mu.Lock()
	commit := st.mu.hs.GetCommit()
	st.mu.Unlock()
	from := s.ccheck[k]
	if first, _ := st.FirstIndex(); from+1 < first {
		// Compacted before this check saw them (applied in the step that
		// committed them): the other nodes' copies were checked, this
		// node's are gone.
		from = min(first-1, commit)
	}
	if commit <= from {
		s.ccheck[k] = commit
		return nil
	}
	ents, err := st.Entries(from+1, commit+1, ^uint64(0))
	if err != nil {
		return fmt.Errorf("node %d group %d: committed entries (%d, %d]: %w", n.id, g, from, commit, err)
	}
	gl := s.commits[g]
	for _, e := range ents {
		got := simEntry{term: e.GetTerm(), data: string(e.GetData())}
		i := e.GetIndex() - 1
		switch {
		case i < uint64(len(gl)):
			if gl[i] != got {
				return fmt.Errorf("node %d group %d: committed index %d is term %d, another node committed term %d there",
					n.id, g, e.GetIndex(), got.term, gl[i].term)
			}
		case i == uint64(len(gl)):
			gl = append(gl, got)
		default:
			return fmt.Errorf("node %d group %d: committed index %d past the longest committed log %d", n.id, g, e.GetIndex(), len(gl))
		}
	}
	s.commits[g] = gl
	s.ccheck[k] = commit
	return nil
}

func (s *sim) checkLog(n *simNode, g uint64) error {
	k := [2]uint64{n.id, g}
	next := s.next(n, g)
	from := s.checked[k]
	if s.cfg.wal {
		// Records below the log start were cut by an entry applied here: what is left is
		// still compared offset by offset, and the start itself with every replica's at
		// the same applied index.
		first, err := s.checkFirst(n, g)
		if err != nil {
			return err
		}
		from = max(from, first)
	}
	if next <= from {
		s.checked[k] = next
		return nil
	}
	recs, err := s.read(n, g, from, int(next-from))
	if err != nil {
		return fmt.Errorf("node %d group %d: read: %w", n.id, g, err)
	}
	if uint64(len(recs)) != next-from {
		return fmt.Errorf("node %d group %d: read %d records from %d, want %d (offsets not dense)", n.id, g, len(recs), from, next-from)
	}
	gl := s.global[g]
	for uint64(len(gl)) < from { // cut on this replica before any check saw these offsets
		gl = append(gl, simRec{time: math.MinInt64, unseen: true})
	}
	for _, r := range recs {
		got := simRec{index: r.Index, time: r.Time, data: string(r.Data)}
		switch {
		case r.Offset < uint64(len(gl)) && gl[r.Offset].unseen:
			gl[r.Offset] = got
		case r.Offset < uint64(len(gl)):
			if gl[r.Offset] != got {
				return fmt.Errorf("node %d group %d: offset %d is %+v, another node applied %+v", n.id, g, r.Offset, got, gl[r.Offset])
			}
		case r.Offset == uint64(len(gl)):
			if len(gl) > 0 && got.time < gl[len(gl)-1].time {
				return fmt.Errorf("node %d group %d: time went back at offset %d", n.id, g, r.Offset)
			}
			if len(gl) > 0 && got.time == gl[len(gl)-1].time {
				s.stats.clamped++ // (or two proposals in one virtual ms)
			}
			// wal records carry no raft index; a batch entry's proposals share theirs
			if len(gl) > 0 && !s.cfg.wal && (got.index < gl[len(gl)-1].index || got.index == gl[len(gl)-1].index && !s.cfg.batch) {
				return fmt.Errorf("node %d group %d: raft index went back at offset %d", n.id, g, r.Offset)
			}
			gl = append(gl, got)
		default:
			return fmt.Errorf("node %d group %d: offset %d past the longest log %d", n.id, g, r.Offset, len(gl))
		}
	}
	s.global[g] = gl
	s.checked[k] = next
	return nil
}

func (s *sim) converged() bool {
	for _, g := range s.logs {
		want := uint64(len(s.global[g]))
		for _, n := range s.nodes {
			if n.e == nil {
				return false
			}
			if s.next(n, g) != want {
				return false
			}
		}
	}
	return true
}

// finalCheck: once everything is healed and converged, every acknowledged
// proposal is on every node at its offset.
func (s *sim) finalCheck() error {
	for _, a := range s.acked {
		gl := s.global[a.group]
		if a.offset < uint64(len(gl)) && gl[a.offset].unseen {
			continue // cut before any replica's log was checked there
		}
		if a.offset >= uint64(len(gl)) || gl[a.offset].data != a.data || gl[a.offset].index != a.index && !s.cfg.wal {
			return s.fail(fmt.Errorf("acknowledged %q (group %d, offset %d) lost", a.data, a.group, a.offset))
		}
	}
	if s.cfg.wal {
		return s.checkStoredOnce()
	}
	return nil
}

func (s *sim) close() {
	for _, n := range append(s.nodes, s.ghosts...) {
		s.closeDB(n)
	}
}

// runSim runs one seed. raft draws its randomized election timeouts from
// crypto/rand; cryptotest.SetGlobalRandom makes that stream seeded too, so
// a seed replays the same run.
func runSim(t *testing.T, cfg simConfig, seed uint64) (acked int, st simStats, err error) {
	cryptotest.SetGlobalRandom(t, seed)
	s, err := newSim(cfg, seed)
	if err != nil {
		return 0, st, err
	}
	defer s.close()
	defer func() {
		// raft panics when it finds its log lost or corrupted: a violation
		// of the run, reported with its seed like any other.
		if r := recover(); r != nil {
			err = s.fail(fmt.Errorf("panic: %v", r))
		}
	}()
	err = s.run()
	for _, n := range s.nodes {
		s.harvest(n)
	}
	for _, n := range s.nodes {
		for _, st := range n.st {
			if st == nil {
				continue
			}
			if first, _ := st.FirstIndex(); first > 1 {
				s.stats.compacted++
			}
		}
	}
	return len(s.acked), s.stats, err
}

// simSeeds returns the seeds to run: one from -seed or QUICMQ_SIM_SEED, or
// QUICMQ_SIM_SEEDS of them (default n).
func simSeeds(t *testing.T, n int) []uint64 {
	if *simSeedFlag >= 0 {
		return []uint64{uint64(*simSeedFlag)}
	}
	if v := os.Getenv("QUICMQ_SIM_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("QUICMQ_SIM_SEED=%q: %v", v, err)
		}
		return []uint64{s}
	}
	if v := os.Getenv("QUICMQ_SIM_SEEDS"); v != "" {
		c, err := strconv.Atoi(v)
		if err != nil || c <= 0 {
			t.Fatalf("QUICMQ_SIM_SEEDS=%q: want a positive count", v)
		}
		n = c
	}
	if testing.Short() {
		n = min(n, 20)
	}
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = uint64(i)
	}
	return seeds
}

// simRuns runs the simulation for each seed with the configuration config
// gives it, failing with the command that reruns a failing seed, and returns
// the seeds run, the acknowledged proposals checked and the summed stats.
func simRuns(t *testing.T, test string, seeds []uint64, config func(seed uint64) simConfig) (runs, acked int, total simStats) {
	t.Helper()
	for _, seed := range seeds {
		a, st, err := runSim(t, config(seed), seed)
		if err != nil {
			t.Fatalf("%v\nrerun: go test -run %s ./replica -seed %d", err, test, seed)
		}
		acked += a
		runs++
		total.add(st)
	}
	t.Logf("%d runs, %d acknowledged proposals checked; %+v", runs, acked, total)
	return runs, acked, total
}

func TestSimRegion(t *testing.T) {
	seeds := simSeeds(t, 200)
	runs, acked, total := simRuns(t, "TestSimRegion", seeds, func(seed uint64) simConfig {
		nodes := 3
		if seed%2 == 1 {
			nodes = 5
		}
		cfg := defaultSimConfig(nodes)
		if seed%3 == 2 {
			// Tiny appends and a short pipeline: catching up pages through
			// Storage.Entries' size limit and raft's flow control.
			cfg.maxSizePerMsg, cfg.maxInflight = 64, 2
		}
		cfg.compact = seed%4 != 1
		return cfg
	})
	if len(seeds) >= 20 && (acked == 0 || total.crashes == 0 || total.partitions == 0 || total.quiesced == 0 ||
		total.leaderTerms <= runs || total.clamped == 0 || total.notLeader == 0 || total.compacted == 0 ||
		total.snapshots == 0 || total.catchups == 0) {
		t.Fatalf("the runs did not exercise what they claim to: %+v", total)
	}
}

// caughtIn runs seeds 0..seeds-1 of a broken variant and returns in how
// many the checker reported a violation.
func caughtIn(t *testing.T, seeds uint64, broken func(*simConfig)) int {
	caught := 0
	for seed := range seeds {
		cfg := defaultSimConfig(3)
		broken(&cfg)
		if _, _, err := runSim(t, cfg, seed); err != nil {
			caught++
			if caught == 1 {
				t.Logf("caught: %v", err)
			}
		}
	}
	t.Logf("caught in %d of %d seeds", caught, seeds)
	return caught
}

// TestSimCatchesApplyBeforeCommit shows the checker failing on a driver
// that applies and acknowledges entries before a quorum has them.
func TestSimCatchesApplyBeforeCommit(t *testing.T) {
	if n := caughtIn(t, 10, func(c *simConfig) { c.broken = true }); n < 5 {
		t.Fatalf("the simulation caught the broken driver in %d of 10 seeds", n)
	}
}

// TestSimCatchesMissingSync shows the checker failing on a driver that
// answers and sends before its writes are synced: crashes then lose entries
// a quorum was counted on, or votes.
func TestSimCatchesMissingSync(t *testing.T) {
	if n := caughtIn(t, 20, func(c *simConfig) { c.brokenNoSync, c.crashRate = true, 0.01 }); n == 0 {
		t.Fatal("the simulation did not catch the unsynced driver in 20 seeds")
	}
}

// TestSimCatchesSnapshotWithoutRecords shows the checker failing on a
// driver that installs a snapshot without fetching the records it needs:
// the replica's log then skips offsets.
func TestSimCatchesSnapshotWithoutRecords(t *testing.T) {
	if n := caughtIn(t, 20, func(c *simConfig) { c.brokenCatchup, c.compact, c.logTail = true, true, 2 }); n < 3 {
		t.Fatalf("the simulation caught the snapshot without records in %d of 20 seeds", n)
	}
}

// TestSimIsReproducible: a seed replays the same run, so a failing seed can
// be rerun and debugged.
func TestSimIsReproducible(t *testing.T) {
	for _, nodes := range []int{3, 5} {
		a1, s1, err1 := runSim(t, defaultSimConfig(nodes), 7)
		a2, s2, err2 := runSim(t, defaultSimConfig(nodes), 7)
		if a1 != a2 || s1 != s2 || (err1 == nil) != (err2 == nil) {
			t.Fatalf("%d nodes, seed 7 twice: %d acks %+v %v, then %d acks %+v %v", nodes, a1, s1, err1, a2, s2, err2)
		}
	}
}

// TestSimRejoin: once per run a node's storage is lost; it restarts empty
// under a new ID and joins its groups, whose leaders add it as a learner,
// let it catch up from their logs (from index 1: compaction is off) and
// only then make it a voter in place of its old ID, with every fault of
// TestSimRegion going on. The checker holds throughout (one leader per
// term, identical committed logs and offsets, every acknowledged proposal
// kept, the rejoined node included once converged), promotion never finds
// the new member's durable log behind the commit index, and no voter set
// holds a node's old and new IDs together.
func TestSimRejoin(t *testing.T) {
	seeds := simSeeds(t, 60)
	runs, acked, total := simRuns(t, "TestSimRejoin", seeds, func(seed uint64) simConfig {
		nodes := 3
		if seed%2 == 1 {
			nodes = 5
		}
		cfg := defaultSimConfig(nodes)
		cfg.wipe = true
		if seed%3 == 2 {
			cfg.maxSizePerMsg, cfg.maxInflight = 64, 2 // catch-up paced in tiny appends
		}
		if seed%4 == 3 {
			cfg.wal, cfg.dedupWindow = true, 16 // records at dense offsets in wal's layout
			cfg.truncate = true                 // and cut: the snapshot's log start past 0
		}
		// Mostly with compaction: the wiped node then catches up through a
		// snapshot and the records fetched from its leader.
		cfg.compact = seed%5 != 4
		return cfg
	})
	if len(seeds) >= 20 && (total.wipes != runs || total.learners < runs || total.promotions < runs || acked == 0 ||
		total.snapshots == 0 || total.catchups == 0 || total.cuts == 0 || total.otherSource == 0) {
		t.Fatalf("the runs did not exercise what they claim to: %+v", total)
	}
}

// harvest adds a node's engine's snapshot counters to the run's stats before
// the engine goes (a crash, a wipe, the end).
func (s *sim) harvest(n *simNode) {
	if n.e != nil {
		s.stats.snapshots += int(n.e.stats.SnapshotsApplied)
		s.stats.fetchedRecords += int(n.e.stats.CatchupRecords)
	}
}

// runFetches moves every catch-up whose next chunk is due: read from the
// source node's state machine and written into the fetching engine, or
// failed when the source is down or cut off, or (sometimes) lost.
func (s *sim) runFetches() error {
	kept := s.fetches[:0]
	for _, f := range s.fetches {
		if f.n.e != f.e {
			continue // the fetching node restarted: its catch-up died with it
		}
		if f.at > s.now {
			kept = append(kept, f)
			continue
		}
		done, err := s.fetchStep(f)
		switch {
		case err != nil:
			s.stats.catchupFails++
			f.e.fetchDone(f.cu.id, err)
		case done:
			s.stats.catchups++
			f.e.fetchDone(f.cu.id, nil)
		default:
			f.at = s.now + 1 + s.rng.IntN(s.cfg.maxDelay)
			kept = append(kept, f)
		}
	}
	s.fetches = kept
	return nil
}

// fetchStep fetches one chunk from the catch-up's current source (f.src in its sources, as
// the driver orders them); a source that is down, cut off or lacks the records hands over
// to the next, and the last one's failure fails the catch-up.
func (s *sim) fetchStep(f *simFetch) (done bool, err error) {
	id := f.cu.sources[f.src]
	src := s.node(id)
	switch {
	case src == nil || src.e == nil:
		err = fmt.Errorf("sim: fetch source %d is down", id)
	case s.cut[[2]uint64{src.id, f.n.id}] || s.cut[[2]uint64{f.n.id, src.id}]:
		err = fmt.Errorf("sim: fetch source %d is cut off", id)
	case s.rng.Float64() < s.cfg.dropRate/2:
		err = errors.New("sim: fetch stream reset")
	}
	span := f.cu.spans[f.span]
	var chunk []byte
	var next uint64
	if err == nil {
		chunk, next, err = src.e.sm.(Snapshotter).ReadChunk(f.cu.group, span.Log, f.next, span.To, 1+s.rng.IntN(200))
	}
	if err != nil {
		if f.src < len(f.cu.sources)-1 {
			f.src++
			return false, nil
		}
		return false, err
	}
	if id != f.cu.source {
		s.stats.otherSource++
	}
	if _, err := f.e.fetchChunk(f.cu.id, span, chunk, id); err != nil {
		return false, err
	}
	f.next = next
	if f.next >= span.To {
		f.span++
		if f.span == len(f.cu.spans) {
			return true, nil
		}
		f.next = f.cu.spans[f.span].From
	}
	return false, nil
}
