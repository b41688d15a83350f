package replica

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// Driver runs every raft group of one node on one goroutine (Run): a single
// ticker ticks the active groups, inbound messages are stepped, and each
// round of Readys is persisted in one batch before its messages leave.
// There is no goroutine or timer per group. Its methods may be called from
// any goroutine; they hand work to Run.
type Driver struct {
	cfg   Config
	e     *engine // owned by Run's goroutine
	inbox chan []Message
	ops   chan func()
	propc chan struct{} // a proposal was queued (buffer 1)
	done  chan struct{}
	// batching: proposals a round takes for one group go into one entry (batch.go).
	batching atomic.Bool

	mu struct {
		sync.Mutex
		running, stopped bool
		dropped          uint64
		// props are the proposals not yet taken by Run: queued without
		// waiting for Run, so that those made while Run waits on a sync
		// all enter the next round (one fsync for all of them).
		props []queuedProposal
	}
	// spare is the queue's other buffer, empty, owned by Run's goroutine between rounds:
	// takeProposals swaps it in, so that a busy queue does not regrow from nothing every
	// round. byGroup is takeProposals' map, kept too.
	spare   []queuedProposal
	byGroup map[uint64][]queuedProposal
}

// maxSpareProposals bounds the queue buffer kept between rounds.
const maxSpareProposals = 1 << 16

type queuedProposal struct {
	group uint64
	data  []byte
	done  func(Result, error)
}

// New validates cfg and returns a driver; it starts nothing (see Run).
func New(cfg Config) (*Driver, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Driver{
		cfg:   cfg,
		e:     newEngine(cfg),
		inbox: make(chan []Message, cfg.InboxSize),
		ops:   make(chan func()),
		propc: make(chan struct{}, 1),
		done:  make(chan struct{}),
	}, nil
}

// Run drives the groups until ctx ends or a commit fails (the error is
// returned: the driver then refuses everything, as wal does after a failed
// sync). Pending proposals are answered with ErrStopped.
func (d *Driver) Run(ctx context.Context) error {
	d.mu.Lock()
	if d.mu.running || d.mu.stopped {
		d.mu.Unlock()
		return fmt.Errorf("replica: run: %w", ErrStopped)
	}
	d.mu.running = true
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.mu.stopped = true
		props := d.mu.props
		d.mu.props = nil
		d.mu.Unlock()
		for _, p := range props {
			p.done(Result{}, fmt.Errorf("replica: propose to group %d: %w", p.group, ErrStopped))
		}
		close(d.done)
	}()
	t := time.NewTicker(d.cfg.TickInterval)
	defer t.Stop()
	// Catch-up fetches run on goroutines of their own (the network never
	// holds up this one), stopped with ctx and waited for before Run returns.
	fctx, cancel := context.WithCancel(ctx)
	var fetches sync.WaitGroup
	defer fetches.Wait()
	defer cancel()
	e := d.e
	paused := false // the ticker is stopped: every group is quiet (needsTicks)
	for {
		select {
		case <-ctx.Done():
			e.abort(ErrStopped)
			return nil
		case <-t.C:
			e.tick()
		case msgs := <-d.inbox:
			e.step(msgs)
		case op := <-d.ops:
			op()
		case <-d.propc:
		}
		// Take whatever else is waiting, so that one round carries it all.
	drain:
		for range 256 {
			select {
			case msgs := <-d.inbox:
				e.step(msgs)
			case op := <-d.ops:
				op()
			default:
				break drain
			}
		}
		d.takeProposals()
		if err := e.process(); err != nil {
			return err
		}
		for _, cu := range e.takeFetches() {
			fetches.Go(func() { d.runFetch(fctx, cu) })
		}
		// An idle node costs nothing per tick: with every group quiet (a quiet group is
		// not ticked) and no snapshot report to time, the ticker stops, and starts again
		// in the round that wakes a group (a message, a proposal, an operation). Raft
		// sees the same ticks either way: only quiet groups miss them, as they do anyway.
		switch need := e.needsTicks(); {
		case need && paused:
			t.Reset(d.cfg.TickInterval)
			paused = false
		case !need && !paused:
			t.Stop()
			e.sleep()
			paused = true
		}
	}
}

// queuePropose queues a proposal for Run, which takes every queued one at
// the start of its next round; done is called with ErrStopped at once, or
// by Run when it stops, if Run never proposes it.
func (d *Driver) queuePropose(group uint64, data []byte, done func(Result, error)) {
	d.mu.Lock()
	if d.mu.stopped {
		d.mu.Unlock()
		done(Result{}, fmt.Errorf("replica: propose to group %d: %w", group, ErrStopped))
		return
	}
	d.mu.props = append(d.mu.props, queuedProposal{group, data, done})
	d.mu.Unlock()
	select {
	case d.propc <- struct{}{}:
	default:
	}
}

// SetBatching turns on (or off) proposing what a round takes for one group as one entry,
// which a replica of a build older than EnvelopeFeature cannot apply: a node turns it on
// once every node of its region announces that level.
func (d *Driver) SetBatching(on bool) { d.batching.Store(on) }

// maxRoundProposalBytes bounds the proposals' data one round takes (takeProposals): what
// is queued beyond it waits for the next round, which starts at once. Without a bound,
// clients that keep many publishes in flight against a leader short of CPU or disk make
// rounds of tens of MiB, during which nothing commits for seconds (and the node's quorum
// timeout, which counts from the group's last progress, fires, and followers that hear no
// heartbeat meanwhile elect another leader); bounded, rounds stay short and pipelined,
// each still carrying the 1,000-2,000 records of 1 KiB a single node's group commit does.
const maxRoundProposalBytes = 2 << 20

// takeProposals proposes, on Run's goroutine, what is queued, in order, up to
// maxRoundProposalBytes (at least one proposal); the rest stays queued for the next round.
func (d *Driver) takeProposals() {
	d.mu.Lock()
	props := d.mu.props
	size, n := 0, 0
	for n < len(props) && (n == 0 || size+len(props[n].data) <= maxRoundProposalBytes) {
		size += len(props[n].data)
		n++
	}
	if n < len(props) {
		d.mu.props = slices.Clone(props[n:])
		select { // the next round takes the rest
		case d.propc <- struct{}{}:
		default:
		}
	} else {
		d.mu.props, d.spare = d.spare, nil
	}
	d.mu.Unlock()
	defer func() {
		if cap(props) <= maxSpareProposals {
			clear(props) // their data and done: not held past the round
			d.spare = props[:0]
		}
	}()
	props = props[:n]
	if !d.batching.Load() || len(props) < 2 {
		for _, p := range props {
			d.e.propose(p.group, p.data, p.done)
		}
		return
	}
	// batch.go: one entry per group for what this round takes, groups in the order of
	// their first proposal, each group's proposals in theirs.
	if oneGroup(props) {
		d.e.proposeBatch(props[0].group, props)
		return
	}
	var order []uint64
	if d.byGroup == nil {
		d.byGroup = make(map[uint64][]queuedProposal)
	}
	byGroup := d.byGroup
	defer clear(byGroup)
	for _, p := range props {
		if _, ok := byGroup[p.group]; !ok {
			order = append(order, p.group)
		}
		byGroup[p.group] = append(byGroup[p.group], p)
	}
	for _, g := range order {
		d.e.proposeBatch(g, byGroup[g])
	}
}

// oneGroup reports whether every proposal of props is to the same group.
func oneGroup(props []queuedProposal) bool {
	for _, p := range props[1:] {
		if p.group != props[0].group {
			return false
		}
	}
	return true
}

// exec runs f on Run's goroutine.
func (d *Driver) exec(ctx context.Context, f func(e *engine)) error {
	select {
	case d.ops <- func() { f(d.e) }:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-d.done:
		return ErrStopped
	}
}

// AddGroup opens a group this node holds, creating it with peers (raft IDs
// of all its replicas, this node included) if nothing of it is stored.
func (d *Driver) AddGroup(ctx context.Context, group uint64, peers []uint64) error {
	_, err := d.OpenGroup(ctx, group, peers)
	return err
}

// OpenGroup is AddGroup, also saying whether this call created the group
// (nothing of it was stored): a group reopened after a restart is not new,
// and whoever led it before may be leading it still.
func (d *Driver) OpenGroup(ctx context.Context, group uint64, peers []uint64) (created bool, err error) {
	return d.addGroup(ctx, group, peers, false)
}

// JoinGroup opens a group this node holds or, when nothing of it is stored,
// opens it empty as a member joining an existing group: it bootstraps no
// configuration of its own, cannot campaign, and waits for the group's
// leader, who adds it (ProposeConfChange, as a learner first), to send it
// the log from index 1, configuration changes included.
func (d *Driver) JoinGroup(ctx context.Context, group uint64) error {
	_, err := d.addGroup(ctx, group, nil, true)
	return err
}

func (d *Driver) addGroup(ctx context.Context, group uint64, peers []uint64, join bool) (bool, error) {
	type opened struct {
		created bool
		err     error
	}
	res := make(chan opened, 1)
	if err := d.exec(ctx, func(e *engine) {
		created, err := e.addGroup(group, peers, join)
		res <- opened{created, err}
	}); err != nil {
		return false, fmt.Errorf("replica: add group %d: %w", group, err)
	}
	o := <-res
	return o.created, o.err
}

// Deliver hands messages from a peer to their groups. It never blocks: when
// the inbox is full the messages are dropped, and raft resends.
func (d *Driver) Deliver(msgs []Message) {
	select {
	case d.inbox <- msgs:
	default:
		d.mu.Lock()
		d.mu.dropped++
		d.mu.Unlock()
	}
}

// Propose appends data to the group's log and returns once the entry is
// committed by a quorum and applied here, with the offset and time it was
// given. It fails at once with a *NotLeaderError when this node does not
// lead the group, with ErrDropped when a leader change discarded the entry;
// an error from ctx leaves the outcome unknown.
func (d *Driver) Propose(ctx context.Context, group uint64, data []byte) (Result, error) {
	type answer struct {
		r   Result
		err error
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("replica: propose to group %d: %w", group, err)
	}
	ch := make(chan answer, 1)
	d.queuePropose(group, data, func(r Result, err error) { ch <- answer{r, err} })
	select {
	case a := <-ch:
		return a.r, a.err
	case <-ctx.Done():
		return Result{}, fmt.Errorf("replica: propose to group %d: %w", group, ctx.Err())
	case <-d.done:
		select {
		case a := <-ch:
			return a.r, a.err
		default:
			return Result{}, fmt.Errorf("replica: propose to group %d: %w", group, ErrStopped)
		}
	}
}

// Campaign makes this node stand for election in the group at once.
func (d *Driver) Campaign(ctx context.Context, group uint64) error {
	errc := make(chan error, 1)
	err := d.exec(ctx, func(e *engine) {
		g, ok := e.groups[group]
		if !ok {
			errc <- fmt.Errorf("%w %d", ErrUnknownGroup, group)
			return
		}
		e.setQuiet(g, false)
		e.touch(g)
		errc <- g.rn.Campaign()
	})
	if err == nil {
		err = <-errc
	}
	if err != nil {
		return fmt.Errorf("replica: campaign in group %d: %w", group, err)
	}
	return nil
}

// WakeLedBy makes the quiet groups led by node tick again; the node's
// failure detector calls it when node is suspected, since a quiet group
// does not notice its leader's death by itself.
func (d *Driver) WakeLedBy(ctx context.Context, node uint64) error {
	return d.exec(ctx, func(e *engine) { e.wakeLedBy(node) })
}

// Wake makes a quiet group tick again (it quiets itself again once idle).
// A quiet leader does not tick, so raft never clears a dead member's
// RecentActive flag (checkQuorum clears it once per election timeout of
// ticks): a membership step that waits for a member to fall silent wakes
// the group for as long as it waits.
func (d *Driver) Wake(ctx context.Context, group uint64) error {
	return d.exec(ctx, func(e *engine) {
		if g, ok := e.groups[group]; ok {
			e.setQuiet(g, false)
		}
	})
}

// Role returns the group's leader and term as of its last round, without waiting
// for Run (as Status does): what a caller on a hot path asks. ok is false for a group
// this node does not hold.
func (d *Driver) Role(group uint64) (Role, bool) { return d.e.roles.get(group) }

// Status returns the group's raft status.
func (d *Driver) Status(ctx context.Context, group uint64) (raft.BasicStatus, error) {
	type answer struct {
		s  raft.BasicStatus
		ok bool
	}
	ch := make(chan answer, 1)
	if err := d.exec(ctx, func(e *engine) { s, ok := e.status(group); ch <- answer{s, ok} }); err != nil {
		return raft.BasicStatus{}, fmt.Errorf("replica: status of group %d: %w", group, err)
	}
	a := <-ch
	if !a.ok {
		return raft.BasicStatus{}, fmt.Errorf("%w %d", ErrUnknownGroup, group)
	}
	return a.s, nil
}

// ProposeConfChange proposes a membership change to a group this node
// leads (etcd raft's ConfChangeV2: ReplaceStep builds them). It returns once
// raft has taken the proposal, not when it applies: watch Membership for
// that. raft itself refuses a change while another is pending or the group
// is in a joint configuration, by turning it into an empty entry.
func (d *Driver) ProposeConfChange(ctx context.Context, group uint64, cc *pb.ConfChangeV2) error {
	errc := make(chan error, 1)
	err := d.exec(ctx, func(e *engine) { errc <- e.proposeConfChange(group, cc) })
	if err == nil {
		err = <-errc
	}
	if err != nil {
		return fmt.Errorf("replica: conf change %s in group %d: %w", raft.DescribeConfChange(cc), group, err)
	}
	return nil
}

// Membership returns the group's configuration and, on its leader, each
// member's progress.
func (d *Driver) Membership(ctx context.Context, group uint64) (Membership, error) {
	type answer struct {
		m  Membership
		ok bool
	}
	ch := make(chan answer, 1)
	if err := d.exec(ctx, func(e *engine) { m, ok := e.membership(group); ch <- answer{m, ok} }); err != nil {
		return Membership{}, fmt.Errorf("replica: membership of group %d: %w", group, err)
	}
	a := <-ch
	if !a.ok {
		return Membership{}, fmt.Errorf("%w %d", ErrUnknownGroup, group)
	}
	return a.m, nil
}

// Stats returns a snapshot of the driver's counters.
func (d *Driver) Stats(ctx context.Context) (Stats, error) {
	ch := make(chan Stats, 1)
	if err := d.exec(ctx, func(e *engine) {
		s := e.stats
		s.CatchupsActive, s.Asleep = len(e.catchups), !e.needsTicks()
		ch <- s
	}); err != nil {
		return Stats{}, fmt.Errorf("replica: stats: %w", err)
	}
	s := <-ch
	d.mu.Lock()
	s.InboxFull = d.mu.dropped
	d.mu.Unlock()
	return s, nil
}

// LogBounds returns the group's first and last raft index stored here (the first rises
// as the log is compacted).
func (d *Driver) LogBounds(ctx context.Context, group uint64) (first, last uint64, err error) {
	type answer struct {
		first, last uint64
		ok          bool
	}
	ch := make(chan answer, 1)
	if err := d.exec(ctx, func(e *engine) {
		g, ok := e.groups[group]
		if !ok {
			ch <- answer{}
			return
		}
		f, _ := g.st.FirstIndex()
		l, _ := g.st.LastIndex()
		ch <- answer{f, l, true}
	}); err != nil {
		return 0, 0, fmt.Errorf("replica: log bounds of group %d: %w", group, err)
	}
	a := <-ch
	if !a.ok {
		return 0, 0, fmt.Errorf("%w %d", ErrUnknownGroup, group)
	}
	return a.first, a.last, nil
}
