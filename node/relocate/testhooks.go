package relocate

import (
	"context"
	"maps"
)

// What the node's tests of whole regions read and do (node/drain_test.go, move_test.go,
// movelead_test.go, grow_test.go): nothing of the node calls these.

// Move is a replica move in progress, as the metadata says.
type Move struct {
	Group        uint64
	From, To     string
	FromID, ToID uint64
	Undo         bool // being undone
}

func (gm groupMove) export() Move {
	return Move{Group: gm.group, From: gm.from, To: gm.to, FromID: gm.fromID, ToID: gm.toID, Undo: gm.undo}
}

// Moves lists the moves in progress, by group.
func (r *Relocator) Moves() map[uint64]Move {
	out := map[uint64]Move{}
	for g, gm := range r.moves.movesCopy() {
		out[g] = gm.export()
	}
	return out
}

// Drained reports whether node name is drained, as this node's copy of the metadata says.
func (r *Relocator) Drained(name string) bool { return r.drain.isDrained(name) }

// DrainRequests is how many of this node's drain requests the metadata does not show yet,
// and how many times applied records changed the drained set here.
func (r *Relocator) DrainRequests() (pending, changes int) {
	d := &r.drain
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.mu.want), d.mu.changes
}

// Removing reports whether node name is being removed, and whether as dead.
func (r *Relocator) Removing(name string) (dead, ok bool) {
	q, ok := r.moves.removingReq(name)
	return q.dead, ok
}

// HoldMoveEnds, while on, keeps this node, as the metadata leader, from recording any
// move's end (recordMovesDone): a test orders an undo after a promotion with it.
func (r *Relocator) HoldMoveEnds(on bool) { r.moves.holdEnds.Store(on) }

// TakePromotions returns, and forgets, the promotions this node proposed as a group's
// leader since the last call: group -> the learner's match and the commit index then
// (what TestRemoveTwoNodesUnderLoad's checker judges).
func (r *Relocator) TakePromotions() map[uint64][2]uint64 {
	mv := &r.moves
	mv.mu.Lock()
	defer mv.mu.Unlock()
	out := maps.Clone(mv.mu.promoted)
	clear(mv.mu.promoted)
	return out
}

// StartMove proposes a start record for m (its Undo ignored), as the planners do; false
// when the proposal failed.
func (r *Relocator) StartMove(ctx context.Context, m Move) bool {
	return r.proposeMove(ctx, moveRec{kind: moveKindStart, group: m.Group, from: m.From, fromID: m.FromID, to: m.To, toID: m.ToID})
}

// UndoMove proposes an undo record for m, as undoMoves does.
func (r *Relocator) UndoMove(ctx context.Context, m Move) bool {
	return r.proposeMove(ctx, moveRec{kind: moveKindUndo, group: m.Group, from: m.From, to: m.To, toID: m.ToID})
}
