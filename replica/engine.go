package replica

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/quicmq/quicmq/internal/timeline"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"
)

// engine is the driver's core: every group's RawNode, stepped by one
// goroutine. It has no goroutines, timers or clocks of its own: Run calls it
// from the driver's goroutine, and the simulation calls it directly.
type engine struct {
	cfg   Config
	store *Store
	sm    StateMachine
	tr    Transport

	groups map[uint64]*group
	order  []*group // ascending IDs: deterministic iteration
	// dirty are the groups that may have a Ready: touched (a message, a proposal, a tick,
	// a campaign, a report) or in the last round, so that process looks at them and not at
	// every group (touch).
	dirty []*group
	seq   uint64 // last proposal sequence of this engine
	out   map[uint64][]Message
	// compactDue are the groups that applied entries since process last
	// considered compacting them.
	compactDue []*group
	// catchups are the groups fetching the records of a snapshot, by group;
	// fetches those started and not yet taken by takeFetches (catchup.go).
	catchups    map[uint64]*catchup
	fetches     []*catchup
	nextCatchup uint64
	// fetched counts, by group, the chunk bytes its catch-ups wrote here since the driver
	// started (CatchupBytes).
	fetched map[uint64]uint64
	// reports are the snapshots sent and not yet reported to raft.
	reports []snapReport
	// batch is the rounds' Pebble batch, reset after each round and reused (roundBatch),
	// with the buffer it was made with (batchCap: it grows when a round needs more) and the
	// ticks since a round needed more than roundBatchBase (batchTick).
	batch         *pebble.Batch
	batchCap      int
	batchBigTicks int
	// envBuf is the buffer proposals are framed in (propose, proposeMany), reused: raft
	// copies a leader's proposal into its log before Propose returns (keepEnvelope).
	envBuf []byte
	// recBuf, subBuf and mineBuf are apply's buffers, reused across groups and rounds: the
	// records handed to the state machine, a batch entry's proposals, and this node's
	// proposals among the round's applied entries (readyGroup.mine slices it until the
	// next round). Made afresh, they were allocations per entry and per round.
	recBuf  []Entry
	subBuf  []subProposal
	mineBuf []mineProposal
	// propSubs is proposeMany's buffer of a batch entry's proposals, reused.
	propSubs []subProposal
	failed   error
	stats    Stats
	// roles is each group's leader as of its last round, for readers on other
	// goroutines (Driver.Role).
	roles roleTable
}

// Role is a group's leader and term as this node knows them, and whether this node
// leads it, as of the group's last round.
type Role struct {
	Lead, Term uint64
	Leader     bool // this node is the leader (Lead is its ID)
	// Moving: this node leads and is handing its leadership to another replica
	// (TransferLeadership): it refuses proposals until the transfer ends, within an
	// election timeout, so a caller waits for the new leader rather than propose here.
	Moving bool
}

// roleTable holds every group's Role: written by the engine after a round changed a
// group's leader or term, read by any goroutine without waiting for the engine.
type roleTable struct {
	mu sync.RWMutex
	m  map[uint64]Role
}

func (t *roleTable) set(g *group) {
	bs := g.rn.BasicStatus()
	r := Role{Lead: bs.Lead, Term: bs.GetTerm(), Leader: bs.RaftState == raft.StateLeader, Moving: bs.LeadTransferee != 0}
	t.mu.Lock()
	if t.m == nil {
		t.m = make(map[uint64]Role)
	}
	t.m[g.id] = r
	t.mu.Unlock()
}

func (t *roleTable) get(id uint64) (Role, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	r, ok := t.m[id]
	return r, ok
}

// Stats counts the engine's work, for tests and metrics.
type Stats struct {
	Rounds        uint64 // rounds that handled at least one Ready
	Commits       uint64 // Pebble batches committed (one per round)
	SyncCommits   uint64 // of which synced
	Sends         uint64 // Transport.Send calls
	Messages      uint64 // raft messages sent
	GroupTicks    uint64 // RawNode ticks, summed over groups
	Quiesced      int    // groups quiet now
	Compactions   uint64 // log compactions applied (LogCompaction)
	Unknown       uint64 // inbound messages for groups this node does not hold
	Wakes         uint64 // Wake messages sent (Message.Wake)
	WakeCampaigns uint64 // campaigns started because the leader sent Wake
	InboxFull     uint64 // inbound batches Deliver dropped because Run was behind
	Batched       uint64 // entries proposed carrying several proposals (batch.go)
	BatchedProps  uint64 // the proposals they carried
	// SyncWait is the time Run's goroutine spent in its rounds' synced commits and syncs,
	// during which it steps, proposes and answers nothing: over the time elapsed, the share
	// of the engine the disk holds; over SyncCommits, a sync's mean latency (on a machine
	// short of CPU it also holds the wait for the goroutines that issue and await it).
	SyncWait time.Duration
	// Asleep: every group is quiet and nothing is left to tick, so Run's ticker is
	// stopped (a node's rounds cost nothing until a message, a proposal or an operation).
	Asleep bool

	SnapshotsBuilt    uint64 // snapshots built for raft to send (metadata only)
	SnapshotsSent     uint64 // MsgSnap messages sent
	SnapshotsApplied  uint64 // snapshots installed here
	SnapshotsDeferred uint64 // MsgSnaps received while their group was catching up
	SnapshotsRefused  uint64 // MsgSnaps whose data did not decode
	CatchupsStarted   uint64 // fetches of the records a snapshot needs
	CatchupsDone      uint64
	CatchupsFailed    uint64
	CatchupsActive    int    // in progress now
	CatchupRecords    uint64 // records fetched and written
	CatchupBytes      uint64 // chunk bytes fetched
	CatchupOtherBytes uint64 // of CatchupBytes, fetched from a replica other than the snapshot's sender
}

type group struct {
	id      uint64
	rn      *raft.RawNode
	st      *Storage
	pending []proposal // in proposal order, so terms ascend; values: a pointer each was an allocation per proposal
	quiet   bool
	idle    int // ticks since the last proposal or non-heartbeat message
	// compactAt is the applied index at which this node, leading, last
	// proposed a log compaction, and compactBytes the bytes of entries applied since
	// then or since the last compaction applied (LogCompactBytes).
	compactAt    uint64
	compactBytes uint64
	// confAt is the index of the last membership change in the group's log as this node
	// stored it, and confProposed is set from a membership change proposed here until the
	// round that stores it: until both are applied, the configuration raft reports may not
	// be the one coming (Membership.ConfPending).
	confAt       uint64
	confProposed bool
	// confTerm is the term in which this node, leading, last read confAt from its log
	// (membership): a follower's confAt may be stale, its log is not.
	confTerm uint64
	// leaderless counts the ticks this node has been a follower knowing no
	// leader; it sends Wake every wakeEveryTicks of them (askWake).
	leaderless int
	dirty      bool // in engine.dirty
	// removed: the configuration this replica applied last leaves this node out (its
	// replica was moved off): it neither ticks nor asks to be woken (tick), so a moved
	// replica costs nothing until it is dropped; a message of the group still wakes it.
	removed bool
}

// touch marks g as possibly having a Ready: every change to its RawNode (Step, Tick,
// Propose, Campaign, ReportSnapshot, ProposeConfChange) is preceded by one.
func (e *engine) touch(g *group) {
	if !g.dirty {
		g.dirty = true
		e.dirty = append(e.dirty, g)
	}
}

// wakeEveryTicks is how often a follower that knows no leader repeats its
// Wake: a Wake sent before the peer links are up is dropped.
const wakeEveryTicks = 2

type proposal struct {
	seq  uint64
	term uint64
	done func(Result, error)
}

func newEngine(cfg Config) *engine {
	return &engine{
		cfg:      cfg,
		store:    NewStore(cfg.DB),
		sm:       cfg.StateMachine,
		tr:       cfg.Transport,
		groups:   make(map[uint64]*group),
		out:      make(map[uint64][]Message),
		catchups: make(map[uint64]*catchup),
		fetched:  make(map[uint64]uint64),
	}
}

// addGroup opens a stored group or, when nothing of it is stored, creates
// it: with peers (every replica of a new group must be given the same
// ones) it is bootstrapped, and with join it starts empty as a member
// joining an existing group (see bootstrap).
func (e *engine) addGroup(id uint64, peers []uint64, join bool) (created bool, err error) {
	if _, ok := e.groups[id]; ok {
		return false, fmt.Errorf("replica: add group %d: already open", id)
	}
	cache := e.cfg.EntryCacheBytes
	if e.cfg.noEntryCache {
		cache = 0
	}
	st, err := e.store.GroupCached(id, cache)
	if err != nil {
		return false, err
	}
	hs, cs, _ := st.InitialState()
	last, _ := st.LastIndex()
	empty := len(cs.GetVoters()) == 0 && len(cs.GetLearners()) == 0 && last == 0 && raft.IsEmptyHardState(hs)
	if empty && !join && (len(peers) == 0 || !slices.Contains(peers, e.cfg.NodeID)) {
		return false, fmt.Errorf("replica: add group %d: a new group needs its peers, including this node %d (got %v)", id, e.cfg.NodeID, peers)
	}
	applied, err := e.sm.Applied(id)
	if err != nil {
		return false, fmt.Errorf("replica: add group %d: %w", id, err)
	}
	// The state machine's applied index never passes the stored commit
	// index when both are written in one batch; the clamp keeps raft from
	// refusing to start should a test-only broken variant have done so.
	applied = min(applied, hs.GetCommit())
	rn, err := raft.NewRawNode(&raft.Config{
		ID:                        e.cfg.NodeID,
		ElectionTick:              e.cfg.ElectionTicks,
		HeartbeatTick:             e.cfg.HeartbeatTicks,
		Storage:                   st,
		Applied:                   applied,
		MaxSizePerMsg:             e.cfg.MaxSizePerMsg,
		MaxInflightMsgs:           e.cfg.MaxInflightMsgs,
		MaxUncommittedEntriesSize: e.cfg.MaxUncommittedBytes,
		CheckQuorum:               true,
		PreVote:                   true,
		DisableProposalForwarding: true,
		// A leader a configuration change removed (a replica moved off its node) stops
		// leading, instead of leading a group it is no member of until its process stops.
		StepDownOnRemoval: true,
		Logger:            raftLogger{e.cfg.Logger.With("group", id)},
	})
	if err != nil {
		return false, fmt.Errorf("replica: add group %d: %w", id, err)
	}
	if empty && !join {
		if err := bootstrap(rn, peers); err != nil {
			return false, fmt.Errorf("replica: add group %d: bootstrap: %w", id, err)
		}
	}
	g := &group{id: id, rn: rn, st: st}
	// Reopened after a restart with a configuration that leaves this node out: a replica
	// moved off before it stopped.
	g.removed = !empty && (len(cs.GetVoters()) > 0 || len(cs.GetLearners()) > 0) && !inConfState(cs, e.cfg.NodeID)
	st.setBuild(func() (*pb.Snapshot, error) { return e.buildSnapshot(g) })
	e.groups[id] = g
	e.roles.set(g)
	e.touch(g) // a bootstrapped group's first entries
	i, _ := slices.BinarySearchFunc(e.order, id, func(g *group, id uint64) int { return cmp.Compare(g.id, id) })
	e.order = slices.Insert(e.order, i, g)
	if empty && !join {
		// Persist and apply the bootstrap entries now: raft refuses to
		// campaign while a configuration change is unapplied, and a new
		// topic's preferred replica campaigns as soon as it is added.
		return true, e.process()
	}
	if !empty {
		// Reopened after a restart: this node knows no leader, and a quiet
		// leader would not tell it before its election timeout.
		e.askWake(g)
	}
	return false, nil
}

// askWake sends Wake to the group's other members (see Message.Wake).
func (e *engine) askWake(g *group) {
	st := g.rn.Status()
	term := st.GetTerm()
	for _, ids := range []map[uint64]struct{}{st.Config.Voters.IDs(), st.Config.Learners} {
		for _, to := range slices.Sorted(maps.Keys(ids)) {
			if to == e.cfg.NodeID {
				continue
			}
			e.out[to] = append(e.out[to], Message{Group: g.id, Wake: true, Raft: &pb.Message{
				Type: pb.MsgHeartbeatResp.Enum(), To: new(to), From: new(e.cfg.NodeID), Term: new(term),
			}})
			e.stats.Wakes++
		}
	}
}

// woken handles a peer's Wake: see Message.Wake.
func (e *engine) woken(g *group, m *pb.Message) {
	bs := g.rn.BasicStatus()
	switch {
	case bs.RaftState == raft.StateLeader:
		e.setQuiet(g, false) // it heartbeats the sender within a tick
	case bs.RaftState == raft.StateFollower && bs.Lead == m.GetFrom() && m.GetTerm() >= bs.GetTerm():
		// The sender was this node's leader at this term and now knows
		// no leader: it restarted, or stepped down. Stand at once rather
		// than an election timeout from now (PreVote still asks first).
		e.setQuiet(g, false)
		e.touch(g)
		if err := g.rn.Campaign(); err == nil {
			e.stats.WakeCampaigns++
		}
	}
}

// bootstrap creates a new group's configuration through raft's own
// RawNode.Bootstrap: one ConfChange entry per peer at indexes 1..n, term 1,
// committed, persisted by the first Ready like any entry. The log so
// describes its whole configuration from index 1 on, which is what lets a
// member joining later (empty, under a new ID) rebuild it by replaying the
// log it receives from the leader, with no snapshot. Peers are sorted so
// that every replica writes identical entries.
func bootstrap(rn *raft.RawNode, peers []uint64) error {
	ids := slices.Clone(peers)
	slices.Sort(ids)
	ps := make([]raft.Peer, len(ids))
	for i, p := range ids {
		ps[i] = raft.Peer{ID: p}
	}
	return rn.Bootstrap(ps)
}

// tick advances every active group by one tick and quiesces the idle ones.
func (e *engine) tick() {
	e.tickReports()
	e.batchTick()
	for _, g := range e.order {
		if g.quiet {
			continue
		}
		// Checked before the tick, when the last round has left nothing
		// ready (a leader's tick readies heartbeats).
		if g.removed {
			// No member: raft would never let it campaign, and its leaderless ticks
			// would ask the group to wake it every wakeEveryTicks, for ever.
			e.setQuiet(g, true)
			continue
		}
		if !e.cfg.DisableQuiescence && g.idle >= e.cfg.QuiesceAfterTicks {
			if e.maybeQuiesce(g) {
				continue
			}
		}
		e.touch(g)
		g.rn.Tick()
		if ro, _ := e.roles.get(g.id); ro.Moving {
			e.roles.set(g) // raft gives a transfer up on a tick, with no SoftState change
		}
		g.idle++
		e.stats.GroupTicks++
		if bs := g.rn.BasicStatus(); bs.RaftState == raft.StateFollower && bs.Lead == raft.None {
			if g.leaderless%wakeEveryTicks == 0 {
				e.askWake(g)
			}
			g.leaderless++
		} else {
			g.leaderless = 0
		}
	}
}

// inConfState reports whether node is a voter or learner of cs, in either half of a joint
// configuration.
func inConfState(cs *pb.ConfState, node uint64) bool {
	for _, ids := range [][]uint64{cs.GetVoters(), cs.GetLearners(), cs.GetVotersOutgoing(), cs.GetLearnersNext()} {
		if slices.Contains(ids, node) {
			return true
		}
	}
	return false
}

// maybeQuiesce quiets an idle group whose leader this node is and whose
// followers have everything, telling them with a last heartbeat that
// carries the commit index.
func (e *engine) maybeQuiesce(g *group) bool {
	if len(g.pending) > 0 || g.rn.HasReady() {
		return false
	}
	bs := g.rn.BasicStatus()
	last, _ := g.st.LastIndex()
	if bs.RaftState != raft.StateLeader || bs.LeadTransferee != 0 || bs.GetCommit() != last || bs.Applied != last {
		return false
	}
	caught := true
	var peers []uint64
	g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if pr.Match != last {
			caught = false
		}
		if id != e.cfg.NodeID {
			peers = append(peers, id)
		}
	})
	if !caught {
		return false
	}
	slices.Sort(peers)
	for _, to := range peers {
		e.out[to] = append(e.out[to], Message{Group: g.id, Quiesce: true, Raft: &pb.Message{
			Type: pb.MsgHeartbeat.Enum(), To: new(to), From: new(e.cfg.NodeID),
			Term: new(bs.GetTerm()), Commit: new(last),
		}})
	}
	e.setQuiet(g, true)
	return true
}

// needsTicks reports whether a tick would do anything: a group is awake, a snapshot
// report waits for its ticks (tickReports), or the next round has work left by this one
// (compactions due, groups still ready after process's rounds), or the rounds' batch is
// to shrink (batchTick).
func (e *engine) needsTicks() bool {
	return e.stats.Quiesced < len(e.order) || len(e.reports) > 0 || len(e.compactDue) > 0 || len(e.dirty) > 0 ||
		e.batchCap > roundBatchBase
}

func (e *engine) setQuiet(g *group, q bool) {
	if g.quiet == q {
		return
	}
	g.quiet = q
	g.idle = 0
	if q {
		e.stats.Quiesced++
		// A quiet group's cached entries would only hold memory while it sleeps: with
		// 100,000 topics created, a region's groups kept their last entries, a few MiB a
		// node (issue 29).
		g.st.dropCache()
	} else {
		e.stats.Quiesced--
	}
}

// step hands inbound messages to their groups.
func (e *engine) step(msgs []Message) {
	for _, m := range msgs {
		g, ok := e.groups[m.Group]
		if !ok || m.Raft == nil {
			e.stats.Unknown++
			continue
		}
		if m.Wake {
			e.woken(g, m.Raft)
			continue
		}
		t := m.Raft.GetType()
		switch {
		case m.Quiesce:
		case t == pb.MsgHeartbeatResp:
			// A quiet leader hears its followers' answers to the last
			// heartbeat without waking.
		case t == pb.MsgHeartbeat:
			e.setQuiet(g, false)
		default:
			e.setQuiet(g, false)
			g.idle = 0
		}
		if t == pb.MsgSnap {
			e.onSnap(g, m.Raft)
			continue
		}
		e.touch(g)
		_ = g.rn.Step(m.Raft) // errors are stale or foreign messages: raft ignores them
		if m.Quiesce {
			bs := g.rn.BasicStatus()
			if bs.RaftState == raft.StateFollower && bs.Lead == m.Raft.GetFrom() && bs.GetTerm() == m.Raft.GetTerm() {
				e.setQuiet(g, true)
			}
		}
	}
}

// wakeLedBy makes the quiet groups whose leader is node tick again, for a
// failure detector: a quiet group does not notice its leader's death by
// itself.
func (e *engine) wakeLedBy(node uint64) {
	for _, g := range e.order {
		if g.quiet && g.rn.BasicStatus().Lead == node {
			e.setQuiet(g, false)
		}
	}
}

// propose appends data to the group's log if this node leads it. done is
// called on the engine's goroutine once the entry is applied, or with an
// error when it never will be.
func (e *engine) propose(groupID uint64, data []byte, done func(Result, error)) {
	g, bs, err := e.leading(groupID)
	if err != nil {
		done(Result{}, err)
		return
	}
	e.seq++
	env := e.envelopeBuf(envelopeSize + len(data))
	env = append(env, envelopeVersion)
	env = binary.BigEndian.AppendUint64(env, e.cfg.NodeID)
	env = binary.BigEndian.AppendUint64(env, e.seq)
	env = binary.BigEndian.AppendUint64(env, uint64(e.cfg.Now().UnixNano()))
	env = append(env, data...)
	e.touch(g)
	err = g.rn.Propose(env)
	e.keepEnvelope(env)
	if err != nil {
		done(Result{}, fmt.Errorf("replica: propose to group %d: %w", groupID, err))
		return
	}
	g.pending = append(g.pending, proposal{seq: e.seq, term: bs.GetTerm(), done: e.predictOffsets(groupID, data, done)})
}

// leading returns group groupID, woken, and its status when this node leads it and may
// take proposals now; otherwise the error each proposal to it is done with.
func (e *engine) leading(groupID uint64) (*group, raft.BasicStatus, error) {
	if e.failed != nil {
		return nil, raft.BasicStatus{}, e.failed
	}
	g, ok := e.groups[groupID]
	if !ok {
		return nil, raft.BasicStatus{}, fmt.Errorf("%w %d", ErrUnknownGroup, groupID)
	}
	e.setQuiet(g, false)
	g.idle = 0
	bs := g.rn.BasicStatus()
	if bs.RaftState != raft.StateLeader {
		return nil, bs, &NotLeaderError{Group: groupID, Leader: bs.Lead}
	}
	if bs.LeadTransferee != 0 {
		return nil, bs, leadershipMoving(groupID, bs.LeadTransferee) // transfer.go
	}
	return g, bs, nil
}

const (
	envelopeVersion = 1
	envelopeSize    = 1 + 8 + 8 + 8
	// envelopeCompact marks the driver's own entry that compacts the log:
	// envelopeCompact | index u64. It takes no offset.
	envelopeCompact     = 2
	envelopeCompactSize = 1 + 8
)

// maybeCompact proposes, in a group this node leads, to discard the log up
// to what every replica has stored and this node has applied (never more
// than LogTailEntries applied entries kept for a follower behind), once
// LogCompactEvery entries were applied since the last proposal. Every
// replica compacts when it applies the entry, in the apply batch.
func (e *engine) maybeCompact(g *group) {
	if !e.cfg.LogCompaction {
		return
	}
	bs := g.rn.BasicStatus()
	if bs.RaftState != raft.StateLeader || bs.Applied < g.compactAt+e.cfg.LogCompactEvery && g.compactBytes < e.cfg.LogCompactBytes {
		return
	}
	upTo := bs.Applied
	g.rn.WithProgress(func(_ uint64, _ raft.ProgressType, pr tracker.Progress) {
		upTo = min(upTo, pr.Match)
	})
	if bs.Applied > e.cfg.LogTailEntries {
		upTo = max(upTo, bs.Applied-e.cfg.LogTailEntries)
	}
	if first, _ := g.st.FirstIndex(); upTo < first {
		return
	}
	g.compactAt, g.compactBytes = bs.Applied, 0
	data := binary.BigEndian.AppendUint64([]byte{envelopeCompact}, upTo)
	e.touch(g)
	_ = g.rn.Propose(data) // refused only when raft drops proposals: the next round tries again
}

// envelope is the driver's framing of a proposal inside a raft entry.
type envelope struct {
	node, seq uint64
	time      int64
	data      []byte
}

func decodeEnvelope(p []byte) (envelope, error) {
	if len(p) < envelopeSize || p[0] != envelopeVersion {
		return envelope{}, fmt.Errorf("%w: entry of %d bytes is not a proposal", errCorrupt, len(p))
	}
	return envelope{
		node: binary.BigEndian.Uint64(p[1:9]),
		seq:  binary.BigEndian.Uint64(p[9:17]),
		time: int64(binary.BigEndian.Uint64(p[17:25])),
		data: p[envelopeSize:],
	}, nil
}

// batchOverhead is a round batch's guess of the bytes an entry takes in it
// besides its data (key, framing, the records' keys and headers).
const batchOverhead = 96

// readyGroup is one group's Ready within a round, with what applying it
// produced.
// noteConfChanges records the membership changes among entries about to be stored.
func (g *group) noteConfChanges(entries []*pb.Entry) {
	g.confProposed = false
	for _, ent := range entries {
		if t := ent.GetType(); t == pb.EntryConfChange || t == pb.EntryConfChangeV2 {
			g.confAt = max(g.confAt, ent.GetIndex())
		}
	}
}

type readyGroup struct {
	g       *group
	rd      raft.Ready
	applied []*pb.Entry // entries applied in this round
	results []Result
	// mine are this node's proposals among applied, in raft index order, as apply decoded
	// them: complete matches them to pending proposals without a map of the results or a
	// second decode of every entry.
	mine  []mineProposal
	early bool          // the appends were sent before the round's commit
	later []*pb.Message // then the messages left to send after it
}

// process handles the Ready of every group that has one, in rounds. A
// round writes all of its groups' entries, HardStates and applied state in
// one Pebble batch (synced if any group needs it), and only then sends
// messages, advances the groups and completes proposals.
func (e *engine) process() error {
	if e.failed != nil {
		return e.failed
	}
	// Compactions are proposed here, not as soon as entries apply, so that
	// they ride in the round of the proposals that came meanwhile instead
	// of costing a round (and a sync) of their own.
	for _, g := range e.compactDue {
		e.maybeCompact(g)
	}
	e.compactDue = e.compactDue[:0]
	for range 8 {
		// Only the touched groups, in ascending IDs (deterministic, as the simulation
		// needs): a round costs what changed, however many groups are quiet.
		slices.SortFunc(e.dirty, func(a, b *group) int { return cmp.Compare(a.id, b.id) })
		var rds []*readyGroup
		kept := e.dirty[:0]
		for _, g := range e.dirty {
			if g.rn.HasReady() {
				rds = append(rds, &readyGroup{g: g, rd: g.rn.Ready()})
				kept = append(kept, g) // Advance may leave more: looked at again
			} else {
				g.dirty = false
			}
		}
		clear(e.dirty[len(kept):])
		e.dirty = kept
		if len(rds) == 0 {
			e.flush()
			return nil
		}
		if err := e.round(rds); err != nil {
			e.fail(err)
			return err
		}
	}
	e.flush()
	return nil
}

// round handles one round of Readys of every ready group: stage snapshots, entries, hard
// states and committed entries into one batch, send what may leave before the sync, commit,
// then send the rest and Advance. Long by design: the order of these steps is what etcd
// raft's Ready contract and I2 rest on, and it reads top to bottom here in one place.
func (e *engine) round(rds []*readyGroup) error {
	e.stats.Rounds++
	e.roundStart()
	if tl := e.cfg.Timeline; tl != nil {
		start := time.Now()
		defer func() { tl.Add(timeline.Round, start, time.Since(start), int64(len(rds))) }()
	}
	// Sized for the entries to store and the records they apply, so that
	// the batch does not grow (copying itself) record by record.
	size := 0
	for _, r := range rds {
		for _, ent := range r.rd.Entries {
			size += len(ent.GetData()) + batchOverhead
		}
		for _, ent := range r.rd.CommittedEntries {
			// An entry of many records applies each under a key and header of its own
			// (about 40 bytes a record besides its payload; a quarter more covers records
			// of 160 bytes and up): short, the batch would double and copy itself.
			size += len(ent.GetData()) + len(ent.GetData())/4 + batchOverhead
		}
	}
	b, release := e.roundBatch(size)
	defer release()
	var (
		after    []func()
		restored []func() error
		sync     bool
	)
	for _, r := range rds {
		rd, g := r.rd, r.g
		g.noteConfChanges(rd.Entries)
		var snapIdx uint64
		if !raft.IsEmptySnap(rd.Snapshot) {
			fst, fsm, err := e.stageRestore(b, g, rd.Snapshot)
			if err != nil {
				return err
			}
			restored = append(restored, fsm)
			after = append(after, fst, func() { e.stats.SnapshotsApplied++ })
			snapIdx = rd.Snapshot.GetMetadata().GetIndex()
			g.removed = !inConfState(rd.Snapshot.GetMetadata().GetConfState(), e.cfg.NodeID)
			sync = true
		}
		f, err := g.st.stageAppendAfter(b, rd.Entries, snapIdx)
		if err != nil {
			return err
		}
		if f != nil {
			after = append(after, f)
		}
		if !raft.IsEmptyHardState(rd.HardState) {
			f, err := g.st.stageHardState(b, rd.HardState)
			if err != nil {
				return err
			}
			after = append(after, f)
		}
		sync = sync || rd.MustSync
		toApply := rd.CommittedEntries
		if e.cfg.brokenApplyBeforeCommit || (brokenAckBuild && g.rn.BasicStatus().RaftState == raft.StateLeader) {
			toApply = rd.Entries
		}
		if err := e.apply(b, r, toApply, &after); err != nil {
			return err
		}
	}
	// A leader's appends leave before its own write is durable, so that
	// its fsync and its followers' overlap (raft allows it: the leader
	// counts itself toward the quorum only once Advance reports its entries
	// stable). Everything else waits for the commit, as does any message of
	// a round that changes the term or vote.
	for _, r := range rds {
		if hs := r.rd.HardState; !raft.IsEmptyHardState(hs) {
			if term, vote := r.g.st.termVote(); hs.GetTerm() != term || hs.GetVote() != vote {
				continue
			}
		}
		rest := r.rd.Messages[:0:0]
		for _, m := range r.rd.Messages {
			if m.GetType() == pb.MsgApp {
				e.out[m.GetTo()] = append(e.out[m.GetTo()], Message{Group: r.g.id, Raft: m})
			} else {
				rest = append(rest, m)
			}
		}
		r.later = rest
		r.early = true
	}
	e.flush()
	// Proposals whose entries this round applies complete before its fsync (ackEarly):
	// an applied entry is committed, so stored durably on a quorum already (a leader
	// counts its own log toward the quorum only once Advance reports it stable), and the
	// batch that applies it is atomic in Pebble's WAL, which the sync below makes durable
	// with everything before it. That sync is for this round's own appends and HardState,
	// which the messages sent after it promise. A round that restores a snapshot keeps the
	// plain order.
	ackEarly := sync && len(restored) == 0 && !e.cfg.brokenNoSync && !e.cfg.ackAfterSync && applies(rds)
	if !b.Empty() {
		opt := pebble.NoSync
		if sync && !ackEarly && !e.cfg.brokenNoSync {
			opt = pebble.Sync
			e.stats.SyncCommits++
		}
		start := time.Now()
		if err := b.Commit(opt); err != nil {
			return fmt.Errorf("replica: commit round: %w", err)
		}
		if opt == pebble.Sync {
			e.stats.SyncWait += time.Since(start)
			e.cfg.Timeline.Add(timeline.Sync, start, time.Since(start), 0)
		}
		e.stats.Commits++
	}
	for _, f := range after {
		f()
	}
	for _, f := range restored {
		if err := f(); err != nil {
			return err
		}
	}
	if len(restored) > 0 {
		e.cfg.Timeline.Add(timeline.Restore, time.Now(), 0, int64(len(restored)))
	}
	e.sm.Committed()
	if ackEarly {
		for _, r := range rds {
			e.complete(r)
		}
		start := time.Now()
		if err := e.cfg.DB.LogData(nil, pebble.Sync); err != nil {
			return fmt.Errorf("replica: sync round: %w", err)
		}
		e.stats.SyncWait += time.Since(start)
		e.stats.SyncCommits++
		e.cfg.Timeline.Add(timeline.Sync, start, time.Since(start), 0)
	}
	for _, r := range rds {
		msgs := r.rd.Messages
		if r.early {
			msgs = r.later
		}
		for _, m := range msgs {
			e.out[m.GetTo()] = append(e.out[m.GetTo()], Message{Group: r.g.id, Raft: m})
		}
	}
	e.flush()
	for _, r := range rds {
		r.g.rn.Advance(r.rd)
		e.snapshotSent(r.g.id, r.rd.Messages)
	}
	for _, r := range rds {
		if r.rd.SoftState != nil || !raft.IsEmptyHardState(r.rd.HardState) {
			e.roles.set(r.g)
		}
		if !ackEarly {
			e.complete(r)
		}
		if e.cfg.LogCompaction && len(r.applied) > 0 {
			e.compactDue = append(e.compactDue, r.g)
		}
	}
	return nil
}

// roundStart readies apply's buffers for a round: the last round's readyGroups are done
// with mineBuf.
func (e *engine) roundStart() {
	clear(e.mineBuf)
	e.mineBuf = e.mineBuf[:0]
}

// The rounds' reused batch (roundBatch) starts at roundBatchBase bytes of buffer and grows
// to fit the largest round (a quarter more), up to roundBatchMax; a round larger than that
// gets a batch of its own. It shrinks back to roundBatchBase once roundBatchKeepTicks ticks
// passed without a round larger than the base (and the ticker runs until then:
// needsTicks), so that a node gone quiet keeps no buffer sized for its busiest rounds.
//
// Why it grows: a round's bytes written into memory new to the process cost far more than
// the copy itself (each fresh page faults; measured 20 µs per 4 KiB page on this project's
// VMs, against 0.3 µs to copy it once faulted in). Under 16 pipelined publishers a
// follower's rounds were 1.5 MB on average and up to 16 MB (the entries it stores and the
// records it applies): with a 4 MiB retained buffer every round past it allocated afresh.
const (
	roundBatchBase      = 4 << 20
	roundBatchMax       = 64 << 20
	roundBatchKeepTicks = 50
)

// roundBatch returns the batch for a round of about size bytes, and what to call once the
// round is done with it. Rounds reuse one batch (Pebble's Batch.Reset keeps its buffer).
func (e *engine) roundBatch(size int) (*pebble.Batch, func()) {
	if size > roundBatchMax {
		b := e.cfg.DB.NewBatchWithSize(size)
		return b, func() { _ = b.Close() }
	}
	if size > roundBatchBase {
		e.batchBigTicks = 0
	}
	if e.batch == nil || size > e.batchCap {
		// The old batch is dropped, not closed: Close would put it, with its buffer of up
		// to roundBatchMax, in Pebble's pool of batches for any other NewBatch to take.
		e.batchCap = max(roundBatchBase, min(size+size/4, roundBatchMax))
		e.batch = e.cfg.DB.NewBatch(pebble.WithInitialSizeBytes(e.batchCap), pebble.WithMaxRetainedSizeBytes(roundBatchMax))
	}
	b := e.batch
	return b, func() {
		// A round past its guess grew the buffer, which Reset keeps (up to roundBatchMax).
		if n := b.Len(); n > e.batchCap && n <= roundBatchMax {
			e.batchCap = n
		}
		b.Reset()
	}
}

// sleep lets go of the rounds' batch once every group is quiet and the ticker stops: a
// quiet node kept its buffer of roundBatchBase bytes or more (4 MiB of each node's live
// heap, which the collector's goal then doubles, after a region created 100,000 topics;
// issue 29). The next round makes a new one, paying the page faults of what it writes.
func (e *engine) sleep() {
	e.batch, e.batchCap, e.batchBigTicks = nil, 0, 0 // dropped, not closed: see roundBatch
}

// batchTick shrinks the rounds' batch back to roundBatchBase once no round needed more for
// roundBatchKeepTicks ticks. Called by tick.
func (e *engine) batchTick() {
	if e.batchCap <= roundBatchBase {
		return
	}
	if e.batchBigTicks++; e.batchBigTicks >= roundBatchKeepTicks {
		e.batch, e.batchCap, e.batchBigTicks = nil, 0, 0 // dropped, not closed: see roundBatch
	}
}

// applies reports whether any group of a round applies entries.
func applies(rds []*readyGroup) bool {
	for _, r := range rds {
		if len(r.applied) > 0 {
			return true
		}
	}
	return false
}

// apply hands the committed entries of one group to the state machine and
// applies configuration changes.
func (e *engine) apply(b *pebble.Batch, r *readyGroup, ents []*pb.Entry, after *[]func()) error {
	if len(ents) == 0 {
		return nil
	}
	g := r.g
	var compactTo uint64
	recs := e.recBuf[:0]
	mine := len(e.mineBuf)
	for _, ent := range ents {
		g.compactBytes += uint64(len(ent.GetData()))
		switch ent.GetType() {
		case pb.EntryNormal:
			if len(ent.GetData()) == 0 {
				continue // a new leader's empty entry: no record, no offset
			}
			if d := ent.GetData(); d[0] == envelopeCompact {
				if len(d) != envelopeCompactSize {
					return fmt.Errorf("replica: group %d: entry %d: %w: compaction of %d bytes", g.id, ent.GetIndex(), errCorrupt, len(d))
				}
				compactTo = max(compactTo, binary.BigEndian.Uint64(d[1:]))
				continue
			}
			if d := ent.GetData(); d[0] == envelopeBatch { // batch.go: many proposals, applied in order
				be, err := decodeBatchInto(d, e.subBuf)
				if err != nil {
					return fmt.Errorf("replica: group %d: entry %d: %w", g.id, ent.GetIndex(), err)
				}
				for _, sp := range be.subs {
					recs = append(recs, Entry{Index: ent.GetIndex(), Time: sp.time, Data: sp.data})
					if be.node == e.cfg.NodeID {
						e.mineBuf = append(e.mineBuf, mineProposal{index: ent.GetIndex(), seq: sp.seq})
					}
				}
				clear(be.subs) // their data alias the entry: not kept by the buffer
				e.subBuf = be.subs[:0]
				continue
			}
			env, err := decodeEnvelope(ent.GetData())
			if err != nil {
				return fmt.Errorf("replica: group %d: entry %d: %w", g.id, ent.GetIndex(), err)
			}
			recs = append(recs, Entry{Index: ent.GetIndex(), Time: env.time, Data: env.data})
			if env.node == e.cfg.NodeID {
				e.mineBuf = append(e.mineBuf, mineProposal{index: ent.GetIndex(), seq: env.seq})
			}
		case pb.EntryConfChange, pb.EntryConfChangeV2:
			var cc pb.ConfChangeI
			if ent.GetType() == pb.EntryConfChange {
				c := &pb.ConfChange{}
				if err := proto.Unmarshal(ent.GetData(), c); err != nil {
					return fmt.Errorf("replica: group %d: conf change %d: %w", g.id, ent.GetIndex(), err)
				}
				cc = c
			} else {
				c := &pb.ConfChangeV2{}
				if err := proto.Unmarshal(ent.GetData(), c); err != nil {
					return fmt.Errorf("replica: group %d: conf change %d: %w", g.id, ent.GetIndex(), err)
				}
				cc = c
			}
			cs := g.rn.ApplyConfChange(cc)
			f, err := g.st.stageConfState(b, cs)
			if err != nil {
				return err
			}
			g.removed = !inConfState(cs, e.cfg.NodeID)
			*after = append(*after, f)
		}
	}
	res, err := e.sm.Apply(b, g.id, ents[len(ents)-1].GetIndex(), recs)
	clear(recs) // the entries' data, which the kept buffer must not hold past the round
	e.recBuf = recs[:0]
	if err != nil {
		return fmt.Errorf("replica: group %d: apply: %w", g.id, err)
	}
	r.applied, r.results, r.mine = ents, res, e.mineBuf[mine:len(e.mineBuf):len(e.mineBuf)]
	if compactTo > 0 {
		g.compactBytes = 0 // whoever leads next counts from this compaction
		if err := e.compact(b, r, ents, compactTo, after); err != nil {
			return err
		}
	}
	return nil
}

// compact stages the discarding of the group's log up to index i (which
// precedes the compaction entry being applied, so this replica holds it) in
// the round's batch, with the applied index it goes with.
func (e *engine) compact(b *pebble.Batch, r *readyGroup, applied []*pb.Entry, i uint64, after *[]func()) error {
	g := r.g
	var term uint64
	found := false
	for _, ents := range [][]*pb.Entry{r.rd.Entries, applied} { // not in Pebble before this batch
		if len(ents) > 0 && ents[0].GetIndex() <= i && i <= ents[len(ents)-1].GetIndex() {
			term, found = ents[i-ents[0].GetIndex()].GetTerm(), true
			break
		}
	}
	if !found {
		t, err := g.st.Term(i)
		if errors.Is(err, raft.ErrCompacted) {
			return nil // an older leader's compaction, past already
		}
		if err != nil {
			return fmt.Errorf("replica: group %d: compact to %d: %w", g.id, i, err)
		}
		term = t
	}
	var staged uint64
	if n := len(r.rd.Entries); n > 0 {
		staged = r.rd.Entries[n-1].GetIndex()
	}
	f, err := g.st.stageCompact(b, i, term, staged)
	if errors.Is(err, raft.ErrCompacted) {
		return nil
	}
	if err != nil {
		return err
	}
	*after = append(*after, f, func() { e.stats.Compactions++ })
	return nil
}

// complete answers this node's proposals among the entries applied: with
// the result when applied, with ErrDropped when an entry of a later term was
// applied first (entries of a term all precede those of later terms, so the
// proposal's entry can no longer commit).
func (e *engine) complete(r *readyGroup) {
	g := r.g
	if len(g.pending) == 0 {
		return
	}
	// Both in raft index order (StateMachine.Apply's results, apply's mine): each entry's
	// are the run at the front once those of earlier entries are passed.
	res, mine := r.results, r.mine
	for _, ent := range r.applied {
		for len(g.pending) > 0 && g.pending[0].term < ent.GetTerm() {
			p := g.pending[0]
			g.pending[0] = proposal{}
			g.pending = g.pending[1:]
			p.done(Result{}, fmt.Errorf("%w (group %d)", ErrDropped, g.id))
		}
		if len(g.pending) == 0 {
			return
		}
		if ent.GetType() != pb.EntryNormal || len(ent.GetData()) == 0 {
			continue
		}
		var xs []Result
		xs, res = runOf(res, ent.GetIndex(), func(x Result) uint64 { return x.Index })
		var ps []mineProposal
		ps, mine = runOf(mine, ent.GetIndex(), func(p mineProposal) uint64 { return p.index })
		for k, p := range ps {
			var x *Result // a result each, or the state machine gave none (applied before)
			if len(xs) == len(ps) {
				x = &xs[k]
			}
			e.completeOne(g, p.seq, ent, x)
		}
	}
}

// mineProposal is a proposal of this node's in an applied entry (a batch entry holds many).
type mineProposal struct{ index, seq uint64 }

// runOf splits s, ascending by index, into the run of items of index i (after skipping
// those below it) and what follows.
func runOf[T any](s []T, i uint64, index func(T) uint64) (run, rest []T) {
	for len(s) > 0 && index(s[0]) < i {
		s = s[1:]
	}
	n := 0
	for n < len(s) && index(s[n]) == i {
		n++
	}
	return s[:n], s[n:]
}

// completeOne completes the pending proposal seq of ent's term, if any, with x (nil: the
// state machine gave no result, the entry having been applied before).
func (e *engine) completeOne(g *group, seq uint64, ent *pb.Entry, x *Result) {
	for i, p := range g.pending {
		if p.seq == seq && p.term == ent.GetTerm() {
			if i == 0 {
				// The usual case: proposals commit in order. slices.Delete moved every
				// proposal still pending, per proposal: thousands of one-record proposals
				// over many topics (issue 29).
				g.pending[0] = proposal{}
				g.pending = g.pending[1:]
			} else {
				g.pending = slices.Delete(g.pending, i, i+1)
			}
			if x == nil {
				p.done(Result{}, fmt.Errorf("replica: group %d: entry %d was applied before", g.id, ent.GetIndex()))
			} else {
				p.done(*x, nil)
			}
			return
		}
	}
}

// flush sends everything queued, one Send per peer, peers in order.
func (e *engine) flush() {
	if len(e.out) == 0 {
		return
	}
	peers := make([]uint64, 0, len(e.out))
	for to := range e.out {
		peers = append(peers, to)
	}
	slices.Sort(peers)
	for _, to := range peers {
		msgs := e.out[to]
		delete(e.out, to)
		e.stats.Sends++
		e.stats.Messages += uint64(len(msgs))
		e.tr.Send(to, msgs)
	}
}

// fail stops the engine for good: a failed commit leaves Pebble's WAL in an
// unknown state (as in wal), so nothing more may be written or answered.
func (e *engine) fail(err error) {
	if e.failed != nil {
		return
	}
	e.failed = err
	e.cfg.Logger.Error("replica driver failed", "err", err)
	e.abort(err)
}

// abort answers every pending proposal with err.
func (e *engine) abort(err error) {
	for _, g := range e.order {
		for _, p := range g.pending {
			p.done(Result{}, err)
		}
		g.pending = nil
	}
}

// status is one group's raft status.
func (e *engine) status(id uint64) (raft.BasicStatus, bool) {
	g, ok := e.groups[id]
	if !ok {
		return raft.BasicStatus{}, false
	}
	return g.rn.BasicStatus(), true
}
