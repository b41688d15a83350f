package routing

import (
	"cmp"
	"slices"
)

// BalanceNode is a node of the region as the replica balancer sees it.
type BalanceNode struct {
	ID string
	// Up says the node is alive (gossip): a group with a replica on a node that is not up
	// is never moved by the balancer (its quorum has no margin left for a move).
	Up bool
	// Balanced says the node takes part in balancing: it is up, a member of the region's
	// metadata group, not drained and not being removed. Only such nodes give or take
	// replicas; the others keep what they hold, and their holdings are not counted.
	Balanced bool
}

// GroupHolding is a raft group and the nodes that hold its replicas (as the metadata
// places it, moves in progress not applied).
type GroupHolding struct {
	ID       uint64
	Replicas []string
	// Leader is the node that leads the group, when known (a hint: "" when not): a replica
	// that does not lead moves first, since moving a leader's replica hands its leadership
	// away first, which costs the group's publishes a round trip or more.
	Leader string
}

// Move moves group Group's replica from node From to node To.
type Move struct {
	Group    uint64
	From, To string
}

// PlanBalance decides the next replica moves that bring the number of groups each balanced
// node holds within one of each other. It is the pure decision the region's metadata
// leader takes on every round, from the metadata's placement and moves in progress and
// from gossip's view of who is up: a new leader derives the same plan from the same state,
// and a plan whose moves were recorded (now in progress) asks for none of them again.
//
//   - inProgress are the moves the metadata records as started and not done: their groups
//     are counted as already moved, and never moved again until done; at most limit moves
//     are in progress at once, theirs included (limit below 1: none is planned).
//   - A move goes from the balanced node holding the most groups to the one holding the
//     fewest that can take one of its groups (it holds none of its replicas), while the
//     two differ by two or more; ties go to the lower ID, and among the groups the lower
//     ID moves first, a group the source does not lead before one it leads. Each move lowers the sum of squares of the holdings, so repeating
//     plan, apply, plan ends, with every pair of balanced nodes within one.
//   - A group moves only when every replica of it is on a node that is up.
//
// Nodes listed twice, groups listed twice and replicas on nodes not listed are handled
// without panicking: the first listing counts, unlisted nodes are neither up nor balanced.
func PlanBalance(nodes []BalanceNode, groups []GroupHolding, inProgress []Move, limit int) []Move {
	up, balanced := map[string]bool{}, map[string]bool{}
	var ids []string
	seen := map[string]bool{}
	for _, n := range nodes {
		if n.ID == "" || seen[n.ID] {
			continue
		}
		seen[n.ID] = true
		up[n.ID] = n.Up
		if n.Balanced && n.Up {
			balanced[n.ID] = true
			ids = append(ids, n.ID)
		}
	}
	slices.Sort(ids)
	// Holdings after the moves in progress, by group (sorted by ID) and by node.
	busy := map[uint64]bool{}
	for _, mv := range inProgress {
		busy[mv.Group] = true
	}
	var gs []*balanceGroup
	byID := map[uint64]*balanceGroup{}
	for _, g := range groups {
		if byID[g.ID] != nil {
			continue
		}
		c := &balanceGroup{id: g.ID, replicas: slices.Clone(g.Replicas), leader: g.Leader, movable: !busy[g.ID]}
		byID[g.ID] = c
		gs = append(gs, c)
	}
	slices.SortFunc(gs, func(a, b *balanceGroup) int { return cmp.Compare(a.id, b.id) })
	for _, mv := range inProgress {
		if g := byID[mv.Group]; g != nil {
			if i := slices.Index(g.replicas, mv.From); i >= 0 && !slices.Contains(g.replicas, mv.To) {
				g.replicas[i] = mv.To
			}
		}
	}
	held := map[string]int{}
	for _, g := range gs {
		for _, r := range g.replicas {
			if balanced[r] {
				held[r]++
			}
			if !up[r] {
				g.movable = false
			}
		}
	}
	var out []Move
	for len(inProgress)+len(out) < limit {
		mv, ok := nextBalanceMove(ids, held, gs)
		if !ok {
			break
		}
		g := byID[mv.Group]
		g.replicas[slices.Index(g.replicas, mv.From)] = mv.To
		g.movable = false
		held[mv.From]--
		held[mv.To]++
		out = append(out, mv)
	}
	return out
}

// balanceGroup is PlanBalance's working copy of a group.
type balanceGroup struct {
	id       uint64
	replicas []string // after the moves in progress and those planned
	leader   string
	movable  bool // not moving, every replica up
}

// nextBalanceMove finds the move PlanBalance makes next: the most loaded source first,
// then the least loaded destination, then the lowest group.
func nextBalanceMove(ids []string, held map[string]int, gs []*balanceGroup) (Move, bool) {
	src := slices.Clone(ids)
	slices.SortStableFunc(src, func(a, b string) int { return cmp.Compare(held[b], held[a]) })
	dst := slices.Clone(ids)
	slices.SortStableFunc(dst, func(a, b string) int { return cmp.Compare(held[a], held[b]) })
	for _, from := range src {
		for _, to := range dst {
			if held[from]-held[to] < 2 {
				break // dst ascends: no later destination is further below from
			}
			for _, leads := range []bool{false, true} {
				for _, g := range gs {
					if g.movable && (g.leader == from) == leads && slices.Contains(g.replicas, from) && !slices.Contains(g.replicas, to) {
						return Move{Group: g.id, From: from, To: to}, true
					}
				}
			}
		}
	}
	return Move{}, false
}
