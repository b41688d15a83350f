package relocate

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicmq/quicmq/replica"
)

// Removing a node and moving replicas (issue 30; docs/architecture.md, "Moving replicas").
//
// 'quicmq nodes remove NAME' asks the region to move every replica NAME holds to other
// nodes and then to let NAME leave the metadata group. Everything that decides a move is a
// record of the metadata group (version 5 below), so a move survives the crash of any node
// taking part in it, the metadata leader's included:
//
//   - remove: NAME is being removed (dead: it will not come back, its replicas are
//     re-created from the survivors). Asked of any node's admin API; the asking node
//     announces it in its gossip tag tagRemoveReq until the record applies, and the
//     metadata leader proposes it (as drains are, drain.go).
//   - start: group G's replica on FROM moves to TO. Proposed by the metadata leader,
//     at most Raft.Moves moves at a time in the region, to the up node holding the fewest
//     groups (removals here; the replica balancer and replacements, balance.go). TO opens
//     the group empty when it applies the record.
//   - done: G's replica is on TO now, not FROM: the placement changes. Proposed by the
//     metadata leader once G's leader reports in its gossip tag tagMovesDone that raft's
//     configuration says so.
//   - removed: NAME holds nothing and left the metadata group: no longer listed, never
//     given a replica or a metadata membership again.
//   - undo: G's move to TO is to be undone: TO is down (gossip no longer sees it alive)
//     or being removed. Proposed by the metadata leader (undoMoves).
//   - undone: G's leader reports in tagMovesDone (a "u" item) that TO is no member of G
//     any more: the move ends with G on its old replicas, the placement unchanged. A move
//     whose configuration already shows TO voting and FROM gone when the undo comes is
//     finished instead (a done record): raft's configuration decides, never the record.
//
// G's leader drives the raft side from the start record and G's configuration alone
// (replica.MoveStep): TO is added as a learner, catches up, and one joint change makes it a
// voter and removes FROM; the leader, when it is FROM, hands its leadership away first. A
// new leader of G (or of the metadata group) reads the same records and configuration and
// takes the next step, so a crash mid-move resumes it; the group never has fewer voters
// than before, and FROM is never removed before TO has caught up.
const MoveVersion = 5

// MoveUndoVersion is the features.Meta level of a build that applies the undo and undone
// records (kinds 5 and 6 of version-5 records): a build of level 5 would skip them and keep
// an undone move in progress forever, so the metadata leader undoes a move only once every
// node of the region announces this level.
const MoveUndoVersion = 6

// Kinds of move record.
const (
	moveKindRemove  = 1 // name str | dead u8 | requested uvarint (Unix nanoseconds)
	moveKindStart   = 2 // group | from str | from raft ID | to str | to raft ID
	moveKindDone    = 3 // group | from str | to str | to raft ID
	moveKindRemoved = 4 // name str
	moveKindUndo    = 5 // group | from str | to str | to raft ID
	moveKindUndone  = 6 // group | from str | to str | to raft ID
)

// tagRemoveReq is the gossip tag of a node that asked for removals the metadata has not
// applied yet: comma-separated name=L@T (live) or name=D@T (dead) items.
const tagRemoveReq = "removereq"

// tagMovesDone is the gossip tag of a group leader whose groups' configurations show moves
// finished that the metadata has not recorded yet: comma-separated GROUP:FROMID:TOID items.
// The raft IDs name the move, not only the group: gossip may still carry the tag of a
// group's earlier move when its next one starts, and that must not finish the next one.
const tagMovesDone = "movesdone"

// tagMoveBytes is the gossip tag of a node that replicas are moving onto: comma-separated
// GROUP:BYTES items, the bytes of records it fetched for each so far, which 'quicmq nodes'
// shows on every node (at most Raft.Moves items in the region).
const tagMoveBytes = "movebytes"

// moveRec is a decoded move record.
type moveRec struct {
	kind     byte
	name     string // remove, removed
	dead     bool
	at       int64
	group    uint64
	from, to string
	fromID   uint64
	toID     uint64
}

func encodeMove(m moveRec) []byte {
	b := []byte{MoveVersion, m.kind}
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	switch m.kind {
	case moveKindRemove:
		str(m.name)
		b = append(b, map[bool]byte{false: 0, true: 1}[m.dead])
		b = binary.AppendUvarint(b, uint64(m.at))
	case moveKindStart:
		b = binary.AppendUvarint(b, m.group)
		str(m.from)
		b = binary.AppendUvarint(b, m.fromID)
		str(m.to)
		b = binary.AppendUvarint(b, m.toID)
	case moveKindDone, moveKindUndo, moveKindUndone:
		b = binary.AppendUvarint(b, m.group)
		str(m.from)
		str(m.to)
		b = binary.AppendUvarint(b, m.toID)
	case moveKindRemoved:
		str(m.name)
	}
	return b
}

// decodeMove decodes a move record (its bytes come from raft entries: every length is
// checked).
func decodeMove(p []byte) (moveRec, error) {
	if len(p) < 2 || p[0] != MoveVersion {
		return moveRec{}, fmt.Errorf("%w: not a move record", errRecord)
	}
	m := moveRec{kind: p[1]}
	d := &reader{p: p[2:]}
	switch m.kind {
	case moveKindRemove:
		m.name = d.str()
		if d.bad || len(d.p) < 1 || d.p[0] > 1 {
			return moveRec{}, fmt.Errorf("%w: remove record", errRecord)
		}
		m.dead = d.p[0] == 1
		d.p = d.p[1:]
		at := d.uv()
		if at > math.MaxInt64 {
			d.bad = true
		}
		m.at = int64(at)
	case moveKindStart:
		m.group, m.from, m.fromID, m.to, m.toID = d.uv(), d.str(), d.uv(), d.str(), d.uv()
	case moveKindDone, moveKindUndo, moveKindUndone:
		m.group, m.from, m.to, m.toID = d.uv(), d.str(), d.str(), d.uv()
	case moveKindRemoved:
		m.name = d.str()
	default:
		return moveRec{}, fmt.Errorf("%w: move record of kind %d", errRecord, m.kind)
	}
	bad := d.bad || len(d.p) > 0
	switch m.kind {
	case moveKindRemove, moveKindRemoved:
		bad = bad || m.name == ""
	default:
		bad = bad || m.group <= MetaGroup || m.from == "" || m.to == "" || m.from == m.to || m.toID == 0 || m.kind == moveKindStart && m.fromID == 0
	}
	if bad {
		return moveRec{}, fmt.Errorf("%w: move record of kind %d", errRecord, m.kind)
	}
	return m, nil
}

// groupMove is a move in progress, as the metadata says.
type groupMove struct {
	group        uint64
	from, to     string
	fromID, toID uint64
	undo         bool // an undo record applied: the group's leader takes TO out of the group
}

// mover is a node's view of the region's removals and moves (applied records), its own
// requests not yet applied, and what its MoveLoop goroutine remembers.
type mover struct {
	mu struct {
		sync.Mutex
		removing map[string]removeReq  // nodes being removed
		removed  map[string]bool       // nodes removed
		at       map[string]int64      // the time of the last remove request applied, by name
		moves    map[uint64]*groupMove // in progress, by group
		want     map[string]removeReq  // this node's requests not yet applied
		progress map[uint64][2]uint64  // group -> learner match, commit (on its leader: MoveLoop)
		fetched  map[uint64][2]uint64  // group moving here -> its catch-up bytes when the move started, counted since (balance.go)
		state    map[uint64]string     // group -> MoveStep's last state here (on its leader)
		// promoted: group -> the learner's match and the commit index when this node
		// proposed its promotion (what TestRemoveTwoNodesUnderLoad's checker judges).
		promoted map[uint64][2]uint64
	}
	wake chan struct{}
	// holdEnds, set by tests only, keeps the metadata leader from recording any move's end
	// (recordMovesDone): a test orders an undo after a promotion with it.
	holdEnds atomic.Bool
	// Owned by MoveLoop's goroutine.
	reqTag, doneTag, bytesTag string
	lastTry                   map[uint64]time.Time // group -> last leadership transfer asked (a source leading)
	m                         *moveMetrics
}

type moveMetrics struct {
	inProgress prometheus.Gauge
	done       prometheus.Counter
	undone     prometheus.Counter
	removing   prometheus.Gauge
	bytes      prometheus.Counter
}

func (mv *mover) init(reg prometheus.Registerer) {
	mv.mu.removing, mv.mu.removed, mv.mu.at = map[string]removeReq{}, map[string]bool{}, map[string]int64{}
	mv.mu.moves, mv.mu.want = map[uint64]*groupMove{}, map[string]removeReq{}
	mv.mu.progress, mv.mu.state, mv.mu.promoted = map[uint64][2]uint64{}, map[uint64]string{}, map[uint64][2]uint64{}
	mv.mu.fetched = map[uint64][2]uint64{}
	mv.wake = make(chan struct{}, 1)
	mv.lastTry = map[uint64]time.Time{}
	mv.m = &moveMetrics{
		inProgress: prometheus.NewGauge(prometheus.GaugeOpts{Name: "quicmq_raft_moves_in_progress",
			Help: "Moves of a group's replica from one node to another in progress in the region, as this node's copy of the metadata says."}),
		done: prometheus.NewCounter(prometheus.CounterOpts{Name: "quicmq_raft_moves_done_total",
			Help: "Moves of a group's replica this node applied as done from the region's metadata (every node counts every move)."}),
		undone: prometheus.NewCounter(prometheus.CounterOpts{Name: "quicmq_raft_moves_undone_total",
			Help: "Moves of a group's replica this node applied as undone from the region's metadata: the new replica's node went down or was being removed before it was promoted, so it was taken out of the group and the group stayed on its old replicas (every node counts every move)."}),
		removing: prometheus.NewGauge(prometheus.GaugeOpts{Name: "quicmq_nodes_removing",
			Help: "Nodes of the region being removed (quicmq nodes remove), as this node's copy of the metadata says."}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "quicmq_raft_move_bytes_total",
			Help: "Bytes of records this node fetched from other replicas to catch up the group replicas moved onto it (the records its snapshot needed; the raft entries appended after it are not counted)."}),
	}
	reg.MustRegister(mv.m.inProgress, mv.m.done, mv.m.undone, mv.m.removing, mv.m.bytes)
}

// gone reports whether name is being removed or was removed: it is given no new replica,
// no leadership and no metadata membership.
func (mv *mover) gone(name string) bool {
	mv.mu.Lock()
	defer mv.mu.Unlock()
	_, ok := mv.mu.removing[name]
	return ok || mv.mu.removed[name]
}

// wanted reports whether this node asked to remove name and the metadata does not show it yet.
func (mv *mover) wanted(name string) bool {
	mv.mu.Lock()
	defer mv.mu.Unlock()
	_, ok := mv.mu.want[name]
	return ok
}

func (mv *mover) isRemoved(name string) bool {
	mv.mu.Lock()
	defer mv.mu.Unlock()
	return mv.mu.removed[name]
}

func (mv *mover) removingReq(name string) (removeReq, bool) {
	mv.mu.Lock()
	defer mv.mu.Unlock()
	q, ok := mv.mu.removing[name]
	return q, ok
}

func (mv *mover) movesCopy() map[uint64]groupMove {
	mv.mu.Lock()
	defer mv.mu.Unlock()
	out := make(map[uint64]groupMove, len(mv.mu.moves))
	for g, m := range mv.mu.moves {
		out[g] = *m
	}
	return out
}

func (mv *mover) metricsLocked() {
	mv.m.inProgress.Set(float64(len(mv.mu.moves)))
	mv.m.removing.Set(float64(len(mv.mu.removing)))
}

// ApplyMove applies a move record (the node's metadata reader, watchMeta, calls it). Every
// check reads state that earlier records alone decided, so every node applies a record
// alike.
func (r *Relocator) ApplyMove(ctx context.Context, data []byte) {
	rec, err := decodeMove(data)
	if err != nil {
		r.log.Error("a metadata record could not be decoded; it is skipped on every node alike", "err", err)
		return
	}
	mv := &r.moves
	switch rec.kind {
	case moveKindRemove:
		mv.mu.Lock()
		mv.mu.at[rec.name] = max(mv.mu.at[rec.name], rec.at)
		if !mv.mu.removed[rec.name] {
			mv.mu.removing[rec.name] = removeReq{dead: rec.dead, at: rec.at}
		}
		mv.metricsLocked()
		mv.mu.Unlock()
		r.log.Info("region metadata: node being removed; its replicas move to other nodes", "node", rec.name, "dead", rec.dead)
	case moveKindStart:
		r.applyMoveStart(ctx, rec)
	case moveKindDone:
		r.applyMoveDone(ctx, rec)
	case moveKindUndo:
		mv.mu.Lock()
		cur := mv.mu.moves[rec.group]
		ok := cur != nil && cur.from == rec.from && cur.to == rec.to && cur.toID == rec.toID && !cur.undo
		if ok {
			cur.undo = true
		}
		mv.mu.Unlock()
		if ok {
			r.log.Warn("region metadata: undoing a group's replica move: its new replica's node is down or being removed; the group stays on its old replicas",
				"group", rec.group, "from", rec.from, "to", rec.to)
		}
	case moveKindUndone:
		mv.mu.Lock()
		cur := mv.mu.moves[rec.group]
		ok := cur != nil && cur.from == rec.from && cur.to == rec.to && cur.toID == rec.toID && cur.undo
		if ok {
			mv.endLocked(rec.group)
			mv.m.undone.Inc()
		}
		mv.metricsLocked()
		mv.mu.Unlock()
		if ok {
			r.log.Warn("region metadata: a group's replica move was undone: the new replica left the group, which stays on its old replicas",
				"group", rec.group, "from", rec.from, "to", rec.to)
		}
	case moveKindRemoved:
		mv.mu.Lock()
		delete(mv.mu.removing, rec.name)
		mv.mu.removed[rec.name] = true
		mv.metricsLocked()
		mv.mu.Unlock()
		r.log.Info("region metadata: node removed from the region", "node", rec.name)
	}
	select {
	case mv.wake <- struct{}{}:
	default:
	}
}

// applyMoveStart records a move's start: the group's replica on rec.from moves to rec.to
// (the first record for a group wins; a duplicate or an overtaken one is ignored). On the
// destination it opens the group, empty, for its leader to add as a learner.
func (r *Relocator) applyMoveStart(ctx context.Context, rec moveRec) {
	mv := &r.moves
	g, placed := r.meta.Group(rec.group)
	mv.mu.Lock()
	ok := placed && mv.mu.moves[rec.group] == nil && slices.Contains(g.Names(), rec.from) && !slices.Contains(g.Names(), rec.to)
	if ok {
		mv.mu.moves[rec.group] = &groupMove{group: rec.group, from: rec.from, fromID: rec.fromID, to: rec.to, toID: rec.toID}
	}
	mv.metricsLocked()
	mv.mu.Unlock()
	if !ok {
		return // a duplicate, or overtaken: the first record wins
	}
	r.log.Info("region metadata: moving a group's replica", "group", g.Label, "from", rec.from, "to", rec.to, "raft_id", rec.toID)
	if rec.to == r.cfg.Name {
		r.startMoveBytes(ctx, rec.group) // balance.go
		// The group's leader adds this node as a learner; until then the group waits
		// here, empty.
		if err := r.d.JoinGroup(ctx, rec.group); err != nil && !strings.Contains(err.Error(), "already open") {
			r.log.Error("could not open a raft group whose replica moves here", "group", g.Label, "err", err)
		}
	}
}

// applyMoveDone records a move's end: the group's replicas name rec.to instead of rec.from.
func (r *Relocator) applyMoveDone(ctx context.Context, rec moveRec) {
	mv := &r.moves
	if rec.to == r.cfg.Name {
		r.countMoveBytes(ctx, rec.group) // balance.go: the last bytes, before the move ends
	}
	mv.mu.Lock()
	cur := mv.mu.moves[rec.group]
	ok := cur != nil && cur.from == rec.from && cur.to == rec.to
	if ok {
		mv.endLocked(rec.group)
		mv.m.done.Inc()
	}
	mv.metricsLocked()
	mv.mu.Unlock()
	if !ok {
		return
	}
	r.meta.Moved(rec.group, rec.from, rec.to, rec.toID)
	r.log.Info("region metadata: a group's replica moved", "group", rec.group, "from", rec.from, "to", rec.to)
}

// endLocked forgets group's move in progress. Caller holds mu.
func (mv *mover) endLocked(group uint64) {
	delete(mv.mu.moves, group)
	delete(mv.mu.progress, group)
	delete(mv.mu.state, group)
	delete(mv.mu.fetched, group)
}

// MoveLoop is the goroutine of removals and moves (see the top of this file): every node
// announces its requests and the moves it saw finish; the metadata leader records them and
// plans the next moves; each group's leader takes the next raft step of its group's move.
func (r *Relocator) MoveLoop(ctx context.Context) {
	tick := time.NewTicker(r.cfg.Settings.ObserveInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-r.moves.wake:
		}
		if !r.meta.Formed() || !r.mesh.Gossip() {
			continue
		}
		now := time.Now()
		r.noteDown(now) // balance.go
		r.setReplicaImbalance()
		r.countMovesBytes(ctx)
		r.announceMoveBytes()
		r.announceRemoveRequests()
		done, undone := r.driveMoves(ctx)
		r.announceMovesDone(done, undone)
		// A metadata leader being removed hands its leadership away (DrainLoop), and raft
		// refuses its proposals while the transfer runs: its successor plans.
		if ro, ok := r.d.Role(MetaGroup); ok && ro.Leader && !ro.Moving && !r.moves.gone(r.cfg.Name) {
			r.recordRemoveRequests(ctx)
			r.recordMovesDone(ctx, done, undone)
			r.undoMoves(ctx)
			r.replaceDown(ctx, now) // balance.go
			r.planMoves(ctx)
		}
	}
}

func (r *Relocator) proposeMove(ctx context.Context, rec moveRec) bool {
	pctx, cancel := context.WithTimeout(ctx, r.cfg.Settings.QuorumTimeout)
	defer cancel()
	if _, err := r.d.Propose(pctx, MetaGroup, encodeMove(rec)); err != nil {
		r.log.Warn("recording a replica move in the region's metadata", "kind", rec.kind, "group", rec.group, "node", rec.name+rec.from, "err", err)
		return false
	}
	return true
}

// driveMoves takes the next raft step of every move whose group this node leads, and
// returns the groups whose configuration shows their move finished, and those whose move
// being undone shows its new replica gone.
func (r *Relocator) driveMoves(ctx context.Context) (done, undone []groupMove) {
	mv := &r.moves
	for _, gm := range slices.SortedFunc(maps.Values(r.moves.movesCopy()), func(a, b groupMove) int { return int(a.group) - int(b.group) }) {
		if ro, ok := r.d.Role(gm.group); !ok || !ro.Leader {
			continue
		}
		m, err := r.d.Membership(ctx, gm.group)
		if err != nil {
			continue
		}
		if gm.undo {
			switch r.undoStep(ctx, gm, m) {
			case replica.ReplaceDone:
				done = append(done, gm)
			case replica.ReplaceNotMember:
				undone = append(undone, gm)
			}
			continue
		}
		state, cc := replica.MoveStep(m, gm.fromID, gm.toID, r.cfg.Settings.CaughtUp)
		if movePromotesEarly && state == replica.ReplaceCatchingUp { // move_broken.go
			state, cc = replica.ReplacePromote, replica.PromoteAndRemove(gm.toID, gm.fromID)
		}
		mv.mu.Lock()
		mv.mu.progress[gm.group] = [2]uint64{m.Match[gm.toID], m.Status.GetCommit()}
		last := mv.mu.state[gm.group]
		mv.mu.state[gm.group] = state.String()
		mv.mu.Unlock()
		log := r.log.With("group", gm.group, "from", gm.from, "to", gm.to, "learner_match", m.Match[gm.toID], "commit", m.Status.GetCommit())
		if last != state.String() {
			log.Info("replica move", "state", state.String())
		}
		switch state {
		case replica.ReplaceDone:
			done = append(done, gm)
			continue
		case replica.ReplaceNotMember:
			// Neither votes: the placement and raft disagree (never made here); the move
			// waits, shown in 'quicmq nodes', rather than naming a replica raft lacks.
			continue
		case replica.ReplaceOldAlive:
			// The source leads: hand the leadership to a caught-up voter first.
			if time.Since(mv.lastTry[gm.group]) < time.Duration(r.cfg.Settings.ElectionTicks)*r.cfg.Settings.TickInterval {
				continue
			}
			counts, eligible := r.leadCounts()
			if id, name, ok := r.transferee(ctx, gm.group, counts, eligible); ok {
				mv.lastTry[gm.group] = time.Now()
				if err := r.d.TransferLeadership(ctx, gm.group, id); err != nil {
					log.Debug("handing a moving replica's leadership away", "to", name, "err", err)
				}
			}
			continue
		case replica.ReplaceCatchingUp:
			// An idle group is quiet and sends the learner nothing: keep it ticking.
			_ = r.d.Wake(ctx, gm.group)
		}
		if cc == nil {
			continue
		}
		if err := r.d.ProposeConfChange(ctx, gm.group, cc); err != nil {
			log.Warn("membership change refused", "step", state.String(), "err", err)
			continue
		}
		if state == replica.ReplacePromote {
			mv.mu.Lock()
			mv.mu.promoted[gm.group] = [2]uint64{m.Match[gm.toID], m.Status.GetCommit()}
			mv.mu.Unlock()
		}
		r.cfg.Changes.WithLabelValues(map[replica.ReplaceState]string{replica.ReplaceAddLearner: "add_learner",
			replica.ReplacePromote: "promote", replica.ReplaceRemoveOld: "remove_old"}[state]).Inc()
	}
	return done, undone
}

// planMoves, on the metadata leader, starts the next moves off the nodes being removed
// (at most Raft.Moves in the region), and lets a node that holds nothing any more leave the
// metadata group.
func (r *Relocator) planMoves(ctx context.Context) {
	mv := &r.moves
	mv.mu.Lock()
	removing := maps.Clone(mv.mu.removing)
	mv.mu.Unlock()
	if len(removing) == 0 {
		r.planBalance(ctx) // balance.go: removals first, then balance
		return
	}
	moves := mv.movesCopy()
	mm := r.meta.Members()
	metaMembers, ids := mm.All(), mm.IDs
	// Destinations: up members of the metadata group not being removed; held counts the
	// groups each holds, moves in progress included.
	var dests []string
	destIDs := map[string]uint64{}
	for _, m := range r.mesh.RaftMembers() {
		if m.Alive && slices.Contains(metaMembers, m.ID) && !mv.gone(m.Name) {
			dests = append(dests, m.Name)
			destIDs[m.Name] = m.ID
		}
	}
	held := map[string]int{}
	groups := r.meta.Groups() // by ID
	for _, g := range groups {
		for _, m := range g.Replicas {
			held[m.Name]++
		}
	}
	for _, gm := range moves {
		held[gm.to]++
		held[gm.from]--
	}
	active := len(moves)
	for _, name := range slices.Sorted(maps.Keys(removing)) {
		// A move onto name (begun before its removal) is undone first (undoMoves): until
		// then name may still be given the group, and it stays.
		holds := slices.ContainsFunc(slices.Collect(maps.Values(moves)), func(gm groupMove) bool { return gm.to == name })
		for _, g := range groups {
			i := slices.IndexFunc(g.Replicas, func(m Replica) bool { return m.Name == name })
			if i < 0 {
				continue
			}
			holds = true
			if _, busy := moves[g.ID]; busy || active >= r.cfg.Settings.Moves {
				continue
			}
			to := ""
			for _, d := range dests {
				if !slices.Contains(g.Names(), d) && (to == "" || held[d] < held[to]) {
					to = d
				}
			}
			if to == "" {
				r.log.Warn("no node to move a group's replica to: every node that is up and stays holds it already", "group", g.Label, "from", name)
				continue
			}
			if !r.proposeMove(ctx, moveRec{kind: moveKindStart, group: g.ID, from: name, fromID: g.Replicas[i].ID, to: to, toID: destIDs[to]}) {
				return
			}
			held[to]++
			active++
			moves[g.ID] = groupMove{}
		}
		if !holds {
			r.leaveMeta(ctx, name, ids[name])
		}
	}
}
