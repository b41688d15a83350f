package routing

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// TestPlanBalanceGrow: a region of three nodes holding 12 groups of three grows to five:
// moves go only to the new nodes, at most limit at once, and repeating plan-then-apply ends
// with every node within one of even (12*3/5 = 7.2: holdings of 7 and 8).
func TestPlanBalanceGrow(t *testing.T) {
	nodes := []BalanceNode{{"a", true, true}, {"b", true, true}, {"c", true, true}, {"d", true, true}, {"e", true, true}}
	var groups []GroupHolding
	for i := range 12 {
		groups = append(groups, GroupHolding{ID: uint64(i + 2), Replicas: []string{"a", "b", "c"}})
	}
	moves := 0
	for round := 0; ; round++ {
		plan := PlanBalance(nodes, groups, nil, 2)
		if len(plan) == 0 {
			break
		}
		if len(plan) > 2 {
			t.Fatalf("round %d: %d moves, limit 2", round, len(plan))
		}
		for _, mv := range plan {
			if mv.To != "d" && mv.To != "e" {
				t.Fatalf("round %d: move to an old node: %+v", round, mv)
			}
		}
		groups = applyMoves(groups, plan)
		moves += len(plan)
	}
	h := holdings(nodes, groups)
	if spread(h) > 1 {
		t.Fatalf("holdings %v", h)
	}
	if moves != 14 { // d and e take 7 each: 36 replicas over 5 nodes, 8,7,7,7,7 at least 14 moved
		t.Fatalf("%d moves, holdings %v", moves, h)
	}
	t.Logf("%d moves, holdings %v", moves, h)
}

// TestPlanBalanceRespects: drained, down and unlisted nodes neither give nor take; a group
// with a replica on a node that is down does not move; a group moving does not move again;
// moves in progress count towards the limit and as done in the holdings.
func TestPlanBalanceRespects(t *testing.T) {
	nodes := []BalanceNode{{"a", true, true}, {"b", true, true}, {"c", true, true}, {"d", true, false}, {"e", false, true}, {"f", true, true}}
	groups := []GroupHolding{
		{ID: 2, Replicas: []string{"a", "b", "c"}},
		{ID: 3, Replicas: []string{"a", "b", "e"}}, // e is down: stays
		{ID: 4, Replicas: []string{"a", "b", "d"}}, // d drained: may move, but never to d
		{ID: 5, Replicas: []string{"a", "b", "c"}}, // moving
		{ID: 6, Replicas: []string{"a", "b", "x"}}, // x unknown: stays
	}
	inProgress := []Move{{Group: 5, From: "a", To: "f"}}
	plan := PlanBalance(nodes, groups, inProgress, 1)
	if len(plan) != 0 {
		t.Fatalf("limit 1 with one move in progress: %+v", plan)
	}
	plan = PlanBalance(nodes, groups, inProgress, 10)
	// After the move in progress: a 4, b 5, c 2, f 1 (d and e not counted).
	want := []Move{{Group: 2, From: "b", To: "f"}, {Group: 4, From: "a", To: "c"}}
	if !reflect.DeepEqual(plan, want) {
		t.Fatalf("plan %+v, want %+v", plan, want)
	}
	if plan := PlanBalance(nodes, groups, inProgress, 0); plan != nil {
		t.Fatalf("limit 0: %+v", plan)
	}
	if plan := PlanBalance(nil, groups, nil, 5); plan != nil {
		t.Fatalf("no nodes: %+v", plan)
	}
}

// TestPlanBalanceSparesLeaders: a replica that leads its group moves only when no other of
// the source's groups can go.
func TestPlanBalanceSparesLeaders(t *testing.T) {
	nodes := []BalanceNode{{"a", true, true}, {"b", true, true}, {"c", true, true}, {"d", true, true}}
	groups := []GroupHolding{
		{2, []string{"a", "b", "c"}, "a"},
		{3, []string{"a", "b", "c"}, "a"},
		{4, []string{"a", "b", "c"}, "b"},
		{5, []string{"a", "b", "c"}, ""},
	}
	// a, b, c hold 4, d 0: a gives first (ties to the lower ID): group 4 (b leads), then b
	// gives group 2 (a leads), then c gives group 3 (a leads); then all within one.
	want := []Move{{4, "a", "d"}, {2, "b", "d"}, {3, "c", "d"}}
	if plan := PlanBalance(nodes, groups, nil, 10); !reflect.DeepEqual(plan, want) {
		t.Fatalf("plan %+v, want %+v", plan, want)
	}
	groups[2].Leader, groups[3].Leader = "a", "a"
	if plan := PlanBalance(nodes, groups, nil, 1); !reflect.DeepEqual(plan, []Move{{2, "a", "d"}}) {
		t.Fatalf("every group led by the source: %+v", plan)
	}
}

// TestPlanBalanceRandom: over seeded random regions (3-7 nodes, replica counts 1-3, some
// nodes drained or down, moves in progress), every planned move is legal, the plan is the
// same whatever the order of its inputs, and plan-then-apply ends within one of even over
// the balanced nodes whenever every node is up and no move is in progress.
func TestPlanBalanceRandom(t *testing.T) {
	seed := uint64(rand.Uint32())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	for iter := range 2000 {
		n := 3 + rng.IntN(5)
		var nodes []BalanceNode
		allUp := rng.IntN(2) == 0
		for i := range n {
			nodes = append(nodes, BalanceNode{ID: fmt.Sprintf("n%d", i), Up: allUp || rng.IntN(5) > 0, Balanced: rng.IntN(6) > 0})
		}
		k := 1 + rng.IntN(min(3, n))
		var groups []GroupHolding
		for g := range rng.IntN(30) {
			perm := rng.Perm(n)[:k]
			var reps []string
			for _, i := range perm {
				reps = append(reps, nodes[i].ID)
			}
			lead := ""
			if rng.IntN(2) == 0 {
				lead = reps[rng.IntN(len(reps))]
			}
			groups = append(groups, GroupHolding{ID: uint64(g + 2), Replicas: reps, Leader: lead})
		}
		var inProgress []Move
		if !allUp && len(groups) > 0 {
			g := groups[rng.IntN(len(groups))]
			for _, nd := range nodes {
				if !slices.Contains(g.Replicas, nd.ID) {
					inProgress = append(inProgress, Move{Group: g.ID, From: g.Replicas[0], To: nd.ID})
					break
				}
			}
		}
		limit := 1 + rng.IntN(3)
		plan := PlanBalance(nodes, groups, inProgress, limit)
		checkPlan(t, iter, nodes, groups, inProgress, limit, plan)
		// Any order of the inputs gives the same plan.
		n2, g2 := slices.Clone(nodes), slices.Clone(groups)
		rng.Shuffle(len(n2), func(i, j int) { n2[i], n2[j] = n2[j], n2[i] })
		rng.Shuffle(len(g2), func(i, j int) { g2[i], g2[j] = g2[j], g2[i] })
		if again := PlanBalance(n2, g2, inProgress, limit); !reflect.DeepEqual(again, plan) {
			t.Fatalf("iter %d: plan %+v, shuffled %+v", iter, plan, again)
		}
		if !allUp || len(inProgress) > 0 {
			continue
		}
		for round := 0; len(plan) > 0; round++ {
			if round > 1000 {
				t.Fatalf("iter %d: no end", iter)
			}
			groups = applyMoves(groups, plan)
			plan = PlanBalance(nodes, groups, nil, limit)
			checkPlan(t, iter, nodes, groups, nil, limit, plan)
		}
		if h := holdings(nodes, groups); spread(h) > 1 {
			t.Fatalf("iter %d: ends with holdings %v", iter, h)
		}
	}
}

func checkPlan(t *testing.T, iter int, nodes []BalanceNode, groups []GroupHolding, inProgress []Move, limit int, plan []Move) {
	t.Helper()
	if len(plan)+len(inProgress) > max(limit, len(inProgress)) {
		t.Fatalf("iter %d: %d planned with %d in progress, limit %d", iter, len(plan), len(inProgress), limit)
	}
	nd := map[string]BalanceNode{}
	for _, n := range nodes {
		nd[n.ID] = n
	}
	moved := map[uint64]bool{}
	for _, mv := range inProgress {
		moved[mv.Group] = true
	}
	for _, mv := range plan {
		var g GroupHolding
		for _, x := range groups {
			if x.ID == mv.Group {
				g = x
			}
		}
		if moved[mv.Group] || !slices.Contains(g.Replicas, mv.From) || slices.Contains(g.Replicas, mv.To) {
			t.Fatalf("iter %d: move %+v of group %+v (moving already: %v)", iter, mv, g, moved[mv.Group])
		}
		for _, r := range g.Replicas {
			if !nd[r].Up {
				t.Fatalf("iter %d: move %+v of a group with a replica on %s, down", iter, mv, r)
			}
		}
		if !nd[mv.From].Balanced || !nd[mv.To].Balanced || !nd[mv.To].Up {
			t.Fatalf("iter %d: move %+v between nodes %+v and %+v", iter, mv, nd[mv.From], nd[mv.To])
		}
		moved[mv.Group] = true
	}
}

func applyMoves(groups []GroupHolding, plan []Move) []GroupHolding {
	out := slices.Clone(groups)
	for _, mv := range plan {
		for i, g := range out {
			if g.ID == mv.Group {
				reps := slices.Clone(g.Replicas)
				reps[slices.Index(reps, mv.From)] = mv.To
				out[i].Replicas = reps
			}
		}
	}
	return out
}

func holdings(nodes []BalanceNode, groups []GroupHolding) map[string]int {
	h := map[string]int{}
	for _, n := range nodes {
		if n.Balanced && n.Up {
			h[n.ID] = 0
		}
	}
	for _, g := range groups {
		for _, r := range g.Replicas {
			if _, ok := h[r]; ok {
				h[r]++
			}
		}
	}
	return h
}

func spread(h map[string]int) int {
	lo, hi, first := 0, 0, true
	for _, c := range h {
		if first || c < lo {
			lo = c
		}
		if first || c > hi {
			hi = c
		}
		first = false
	}
	return hi - lo
}
