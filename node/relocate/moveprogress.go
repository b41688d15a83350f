package relocate

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/node/features"
	"github.com/quicmq/quicmq/node/manage"
	"github.com/quicmq/quicmq/replica"
)

// A move's progress and end: bytes fetched and moves done announced in gossip, recorded by
// the metadata leader, and a move whose destination died undone.

// undoStep takes the next raft step of undoing move gm on its group's leader, whose
// configuration is m: ReplaceDone when the move finished after all (TO votes, FROM is
// gone: it is recorded done), ReplaceNotMember when TO is no member any more (undone),
// ReplaceBusy while a change is under way.
func (r *Relocator) undoStep(ctx context.Context, gm groupMove, m replica.Membership) replica.ReplaceState {
	mv := &r.moves
	state, step := replica.ReplaceBusy, "undoing"
	toIn := m.IsVoter(gm.toID) || m.IsLearner(gm.toID)
	switch {
	case m.Joint():
		// A promotion under way (or its end): wait for raft to leave the joint configuration.
	case m.IsVoter(gm.toID) && !m.IsVoter(gm.fromID) && !m.IsLearner(gm.fromID):
		state, step = replica.ReplaceDone, "done"
	case !toIn && m.ConfPending:
		// Adding TO may be proposed and not applied yet (it would appear after the undo
		// and stay): wait until it applies, then take TO out below.
	case !toIn:
		state, step = replica.ReplaceNotMember, "undone"
	case !m.IsVoter(gm.fromID) && !m.IsLearner(gm.fromID):
		// TO in, FROM gone, not joint: the move is done in all but TO's vote (never made
		// here): a group is never left with fewer replicas than it had, so it waits.
	default:
		// TO is a learner (or, never made here, a voter beside FROM): take it out.
		if err := r.d.ProposeConfChange(ctx, gm.group, replica.RemoveMember(gm.toID)); err != nil {
			r.log.Warn("undoing a replica move: membership change refused", "group", gm.group, "to", gm.to, "err", err)
		} else {
			r.cfg.Changes.WithLabelValues("remove_moving").Inc()
		}
	}
	mv.mu.Lock()
	mv.mu.progress[gm.group] = [2]uint64{m.Match[gm.toID], m.Status.GetCommit()}
	last := mv.mu.state[gm.group]
	mv.mu.state[gm.group] = step
	mv.mu.Unlock()
	if last != step {
		r.log.Info("replica move being undone", "group", gm.group, "from", gm.from, "to", gm.to, "state", step)
	}
	return state
}

// announceMoveBytes sets tagMoveBytes to the bytes fetched so far for each move onto this
// node.
func (r *Relocator) announceMoveBytes() {
	mv := &r.moves
	mv.mu.Lock()
	var items []string
	for _, g := range slices.Sorted(maps.Keys(mv.mu.fetched)) {
		items = append(items, strconv.FormatUint(g, 10)+":"+strconv.FormatUint(mv.mu.fetched[g][1], 10))
	}
	mv.mu.Unlock()
	if tag := strings.Join(items, ","); tag != mv.bytesTag {
		if err := r.mesh.SetTag(tagMoveBytes, tag); err != nil {
			r.log.Warn("announcing the bytes of replica moves in gossip", "err", err)
			return
		}
		mv.bytesTag = tag
	}
}

// parseMoveBytes reads a tagMoveBytes value into group -> bytes; malformed items are skipped.
func parseMoveBytes(s string) map[uint64]uint64 {
	out := map[uint64]uint64{}
	for item := range strings.SplitSeq(s, ",") {
		g, b, ok := strings.Cut(item, ":")
		gi, err1 := strconv.ParseUint(g, 10, 64)
		bi, err2 := strconv.ParseUint(b, 10, 64)
		if ok && err1 == nil && err2 == nil {
			out[gi] = bi
		}
	}
	return out
}

func moveKey(gm groupMove) string {
	return fmt.Sprintf("%d:%d:%d", gm.group, gm.fromID, gm.toID)
}

// undoneKey is a tagMovesDone item of a move undone (a build that does not undo moves
// matches no item of this form).
func undoneKey(gm groupMove) string { return "u" + moveKey(gm) }

func (r *Relocator) announceMovesDone(done, undone []groupMove) {
	items := make([]string, 0, len(done)+len(undone))
	for _, gm := range done {
		items = append(items, moveKey(gm))
	}
	for _, gm := range undone {
		items = append(items, undoneKey(gm))
	}
	if tag := strings.Join(items, ","); tag != r.moves.doneTag {
		if err := r.mesh.SetTag(tagMovesDone, tag); err != nil {
			r.log.Warn("announcing finished replica moves in gossip", "err", err)
			return
		}
		r.moves.doneTag = tag
	}
}

// recordMovesDone, on the metadata leader, records the moves group leaders (this node
// among them) report finished or undone.
func (r *Relocator) recordMovesDone(ctx context.Context, local, localUndone []groupMove) {
	if r.moves.holdEnds.Load() {
		return
	}
	fin := map[string]bool{}
	for _, gm := range local {
		fin[moveKey(gm)] = true
	}
	for _, gm := range localUndone {
		fin[undoneKey(gm)] = true
	}
	for _, m := range r.mesh.RegionMembers() {
		if m.Status != gossip.StatusAlive {
			continue
		}
		for s := range strings.SplitSeq(m.Tags[tagMovesDone], ",") {
			fin[s] = true
		}
	}
	moves := r.moves.movesCopy()
	for _, g := range slices.Sorted(maps.Keys(moves)) {
		gm := moves[g]
		kind := byte(moveKindDone)
		switch {
		case fin[moveKey(gm)]:
		case gm.undo && fin[undoneKey(gm)]:
			kind = moveKindUndone
		default:
			continue
		}
		if !r.proposeMove(ctx, moveRec{kind: kind, group: g, from: gm.from, to: gm.to, toID: gm.toID}) {
			return
		}
	}
}

// undoMoves, on the metadata leader, records the undoing of every move in progress whose
// new replica's node gossip no longer sees alive (its failure detection is the delay: a
// node restarted faster keeps its moves), or which is being removed: its learner would
// never catch up, and the group, which it does not vote in, would wait for it forever.
func (r *Relocator) undoMoves(ctx context.Context) {
	if ok, _ := r.mesh.RegionKnows(features.Meta, MoveUndoVersion); !ok {
		return
	}
	moves := r.moves.movesCopy()
	for _, g := range slices.Sorted(maps.Keys(moves)) {
		gm := moves[g]
		down := r.mesh.MemberStatus(gm.to) != gossip.StatusAlive
		if gm.undo || !down && !r.moves.gone(gm.to) {
			continue
		}
		r.log.Warn("undoing a replica move: the node its new replica is on is down or being removed", "group", g, "from", gm.from, "to", gm.to, "down", down)
		if !r.proposeMove(ctx, moveRec{kind: moveKindUndo, group: g, from: gm.from, to: gm.to, toID: gm.toID}) {
			return
		}
	}
}

// moveInfos lists the moves in progress, with their progress where this node leads the
// group, and their bytes as their destinations announce them (bytes: node name ->
// tagMoveBytes, parsed; this node's own from its counts).
func (r *Relocator) moveInfos(bytes map[string]map[uint64]uint64) map[string][]manage.MoveInfo {
	mv := &r.moves
	mv.mu.Lock()
	defer mv.mu.Unlock()
	out := map[string][]manage.MoveInfo{}
	for _, g := range slices.Sorted(maps.Keys(mv.mu.moves)) {
		gm := mv.mu.moves[g]
		mi := manage.MoveInfo{Group: "g" + strconv.FormatUint(g, 10), From: gm.from, To: gm.to, State: mv.mu.state[g], Bytes: bytes[gm.to][g]}
		if p, ok := mv.mu.progress[g]; ok {
			mi.Entries, mi.Of = p[0], p[1]
		}
		if f, ok := mv.mu.fetched[g]; ok && gm.to == r.cfg.Name {
			mi.Bytes = f[1]
		}
		if mi.State == "" {
			mi.State = "started"
			if gm.undo {
				mi.State = "undoing"
			}
		}
		out[gm.from] = append(out[gm.from], mi)
		out[gm.to] = append(out[gm.to], mi)
	}
	return out
}
