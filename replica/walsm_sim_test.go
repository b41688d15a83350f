package replica

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/quicmq/quicmq/wal"
)

// The simulation with WalSM (cfg.wal): each node's raft state and its
// replicated topics share one wal.Log on the crash-simulating FS; group g
// holds topic "g<g>"; every proposal is an append of one record with a
// producer and sequence, and some are proposed again (a client's retry), so
// the de-duplication window is exercised across crashes and leader changes.
// The checks read the records back through wal.Read.

type simRetry struct {
	group    uint64
	data     string
	producer string
	seq      uint64
}

// simTopicsMax bounds simConfig.topics: the log of topic t of group g is g*simTopicsMax+t.
const simTopicsMax = 64

// logGroup is the group of a log: itself, or the group whose topic it is.
func logGroup(l uint64) uint64 {
	if l >= 100*simTopicsMax {
		return l / simTopicsMax
	}
	return l
}

// simTopic names a log's topic: "g<group>", or "g<group>.<t>" in a group of several.
// (strconv, not fmt: the checker names every log of every node at every step.)
func simTopic(l uint64) string {
	if l >= 100*simTopicsMax {
		return "g" + strconv.FormatUint(l/simTopicsMax, 10) + "." + strconv.FormatUint(l%simTopicsMax, 10)
	}
	return "g" + strconv.FormatUint(l, 10)
}

func simGroupOf(topic string) uint64 {
	name, _, _ := strings.Cut(strings.TrimPrefix(topic, "g"), ".")
	g, _ := strconv.ParseUint(name, 10, 64)
	return g
}

func (s *sim) openWal(n *simNode) error {
	l, err := wal.Open("db", wal.Options{FS: n.fs, RetentionInterval: -1})
	if err != nil {
		return fmt.Errorf("node %d: open wal: %w", n.id, err)
	}
	n.log, n.db = l, l.DB()
	return nil
}

func (s *sim) closeDB(n *simNode) {
	if n.log != nil {
		_ = n.log.Close()
		n.log = nil
		return
	}
	_ = n.db.Close()
}

func (s *sim) newSM(n *simNode) (StateMachine, error) {
	if !s.cfg.wal {
		n.sm = NewLogSM(n.db)
		n.sm.brokenNoRecordCheck = s.cfg.brokenCatchup
		return n.sm, nil
	}
	sm, err := NewWalSM(WalSMConfig{Log: n.log, DedupWindow: s.cfg.dedupWindow, GroupOf: simGroupOf})
	if err != nil {
		return nil, fmt.Errorf("node %d: %w", n.id, err)
	}
	n.wsm = sm
	return sm, nil
}

// next is the node's next offset of group g, as served.
func (s *sim) next(n *simNode, g uint64) uint64 {
	if !s.cfg.wal {
		next, _ := n.sm.Next(g)
		return next
	}
	_, next, _ := n.log.Bounds(simTopic(g))
	return next
}

func (s *sim) read(n *simNode, g, from uint64, max int) ([]Record, error) {
	if !s.cfg.wal {
		return n.sm.Read(g, from, max)
	}
	recs, err := n.log.Read(simTopic(g), from, max, 0)
	if err != nil {
		return nil, err
	}
	out := make([]Record, len(recs))
	for i, r := range recs {
		out[i] = Record{Offset: r.Offset, Time: r.Time, Data: r.Payload}
	}
	return out, nil
}

// walProposal is a new keyed record from the node's producer, or now and
// then one proposed before (by any node: a client retrying elsewhere).
func (s *sim) walProposal(n *simNode, g uint64, data string) (string, []byte) {
	if s.cfg.truncate && s.rng.IntN(10) == 0 {
		// A cut, as retention (a few records behind the end) or a purge proposes it.
		e := &WalEntry{Kind: EntryTruncate, Topic: simTopic(g), Purge: s.rng.IntN(4) == 0}
		if !e.Purge {
			e.Value = uint64(max(len(s.global[g])-s.rng.IntN(12), 0))
		}
		p, err := EncodeEntry(nil, e)
		if err != nil {
			s.err = err
		}
		return "", p
	}
	r := simRetry{group: g, data: data, producer: fmt.Sprintf("prod%d", n.id), seq: uint64(s.props)}
	if k := len(s.retries); k > 0 && s.rng.IntN(4) == 0 {
		if c := s.retries[k-1-s.rng.IntN(min(k, 4))]; c.group == g {
			r = c
		}
	}
	if r.data == data {
		s.retries = append(s.retries, r)
	}
	p, err := EncodeEntry(nil, &WalEntry{Kind: EntryAppend, Topic: simTopic(r.group),
		Records: []wal.Record{{ProducerID: r.producer, Sequence: r.seq, Payload: []byte(r.data)}}})
	if err != nil {
		s.err = err
	}
	return r.data, p
}

var (
	errSimRefused = errors.New("refused: sequence older than the window")
	errSimCut     = errors.New("a cut: no record")
)

// walOutcome turns WalSM's result into the offset the record is stored at.
func (s *sim) walOutcome(r Result) (Result, error) {
	if tr, ok := r.Detail.(*TruncateResult); ok {
		if tr.Cut < tr.First || tr.Cut > tr.Next {
			s.err = fmt.Errorf("entry %d: cut to %d outside [%d, %d]", r.Index, tr.Cut, tr.First, tr.Next)
		}
		return r, errSimCut
	}
	ar, ok := r.Detail.(*wal.AppendResult)
	switch {
	case !ok:
		return r, fmt.Errorf("entry %d applied without a result", r.Index)
	case ar.Err != nil:
		s.err = fmt.Errorf("entry %d: %w", r.Index, ar.Err)
		return r, ar.Err
	case len(ar.Skipped) == 1 && ar.Skipped[0].Err != nil:
		return r, errSimRefused
	case len(ar.Skipped) == 1:
		s.stats.duplicates++
		r.Offset = ar.Skipped[0].Offset
	}
	return r, nil
}

// checkStoredOnce: a record retried while its original is in the window is
// never stored twice.
func (s *sim) checkStoredOnce() error {
	for g, gl := range s.global {
		at := map[string]int{}
		for off, r := range gl {
			if r.unseen {
				continue
			}
			if prev, ok := at[r.data]; ok && off-prev <= s.cfg.dedupWindow {
				return s.fail(fmt.Errorf("group %d: %q stored at offsets %d and %d, within the de-duplication window of %d", g, r.data, prev, off, s.cfg.dedupWindow))
			}
			at[r.data] = off
		}
	}
	return nil
}

func TestSimRegionWal(t *testing.T) {
	runs, acked, total := simRuns(t, "TestSimRegionWal", simSeeds(t, 40), func(seed uint64) simConfig {
		nodes := 3
		if seed%4 == 3 {
			nodes = 5
		}
		cfg := defaultSimConfig(nodes)
		cfg.wal, cfg.dedupWindow = true, 16
		cfg.compact = seed%4 != 1
		cfg.truncate = seed%3 == 0
		return cfg
	})
	if runs >= 20 && (acked == 0 || total.crashes == 0 || total.partitions == 0 || total.duplicates == 0 || total.clamped == 0 || total.compacted == 0 ||
		total.snapshots == 0 || total.catchups == 0 || total.cuts == 0 || total.startedPast0 == 0) {
		t.Fatalf("the runs did not exercise what they claim to: %+v", total)
	}
}

// TestSimRegionWalManyTopics: the wal simulation with several topics in each group, as a
// replicated region keeps them: each topic's offsets dense and identical on every replica
// through crashes, partitions, compaction, snapshots with their catch-ups and cuts.
func TestSimRegionWalManyTopics(t *testing.T) {
	runs, acked, total := simRuns(t, "TestSimRegionWalManyTopics", simSeeds(t, 30), func(seed uint64) simConfig {
		cfg := defaultSimConfig(3)
		cfg.wal, cfg.dedupWindow, cfg.topics = true, 16, 2+int(seed%4)
		cfg.compact = seed%4 != 1
		cfg.truncate = seed%3 == 0
		return cfg
	})
	if runs >= 20 && (acked == 0 || total.crashes == 0 || total.duplicates == 0 || total.compacted == 0 || total.snapshots == 0 || total.cuts == 0) {
		t.Fatalf("the runs did not exercise what they claim to: %+v", total)
	}
}

// TestSimRegionWalBatched: the wal simulation with proposals in bursts, each group's as one
// batch entry (batch.go), over several topics per group: every proposal of a batch gets its
// own offset in its own topic, dense and identical on every replica, through crashes,
// partitions, compaction, snapshots, catch-ups and cuts; and the plain log simulation the same.
func TestSimRegionWalBatched(t *testing.T) {
	runs, acked, total := simRuns(t, "TestSimRegionWalBatched", simSeeds(t, 30), func(seed uint64) simConfig {
		cfg := defaultSimConfig(3)
		cfg.batch, cfg.proposeRate = true, 0.08
		cfg.wal, cfg.dedupWindow, cfg.topics = seed%5 != 4, 16, 1+int(seed%4)
		cfg.compact = seed%4 != 1
		cfg.truncate = cfg.wal && seed%3 == 0
		return cfg
	})
	if runs >= 20 && (acked == 0 || total.batches == 0 || total.crashes == 0 || total.duplicates == 0 || total.compacted == 0 || total.snapshots == 0 || total.cuts == 0) {
		t.Fatalf("the runs did not exercise what they claim to: %+v", total)
	}
}

// TestSimWalCatchesApplyBeforeCommit: the wal-backed checks fail on a driver
// that applies entries before they commit.
func TestSimWalCatchesApplyBeforeCommit(t *testing.T) {
	caught := 0
	for seed := range uint64(10) {
		cfg := defaultSimConfig(3)
		cfg.wal, cfg.dedupWindow, cfg.broken = true, 16, true
		if _, _, err := runSim(t, cfg, seed); err != nil {
			caught++
		}
	}
	if caught < 5 {
		t.Fatalf("the wal simulation caught the broken driver in %d of 10 seeds", caught)
	}
}

// checkFirst returns the node's log start of group g's topic, checking it against the
// start its applied state records and against every other replica's at the same applied
// index: cuts are entries, so the start is a function of the applied index.
func (s *sim) checkFirst(n *simNode, g uint64) (uint64, error) {
	first, _, ok := n.log.Bounds(simTopic(g))
	if !ok || n.wsm == nil {
		return 0, nil
	}
	wg := n.wsm.groups[logGroup(g)]
	if wg == nil {
		return first, nil
	}
	var stFirst uint64
	if st := wg.topics[simTopic(g)]; st != nil {
		stFirst = st.first
	}
	if first != stFirst {
		return 0, fmt.Errorf("node %d group %d: the log starts at %d, its applied state (index %d) says %d", n.id, g, first, wg.applied, stFirst)
	}
	k := [2]uint64{g, wg.applied}
	if want, seen := s.firstAt[k]; seen && want != first {
		return 0, fmt.Errorf("node %d group %d: the log starts at %d at applied index %d, another replica's started at %d", n.id, g, first, wg.applied, want)
	} else if !seen {
		s.firstAt[k] = first
	}
	if first > 0 {
		s.stats.startedPast0++
	}
	return first, nil
}
