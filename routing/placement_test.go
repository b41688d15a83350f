package routing

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func placeMembers(ids ...string) []PlacementMember {
	var ms []PlacementMember
	for _, id := range ids {
		ms = append(ms, PlacementMember{ID: id, Eligible: true})
	}
	return ms
}

func TestPlace(t *testing.T) {
	five := placeMembers("n1", "n2", "n3", "n4", "n5")
	dead := append(placeMembers("n1", "n2"), PlacementMember{ID: "n3"}, PlacementMember{ID: "n4"})
	for _, tc := range []struct {
		name     string
		members  []PlacementMember
		holdings map[string][]string
		reqs     []PlacementRequest
		check    func(t *testing.T, ps []Placement)
	}{
		{"new topic gets distinct eligible members", five, nil, []PlacementRequest{{"orders", 3}}, func(t *testing.T, ps []Placement) {
			p := ps[0]
			if p.Err != nil || len(p.Replicas) != 3 || p.Existing {
				t.Fatalf("%+v", p)
			}
			if s := slices.Compact(slices.Sorted(slices.Values(p.Replicas))); len(s) != 3 {
				t.Fatalf("replicas not distinct: %v", p.Replicas)
			}
			if p.Replicas[0] != Owner("orders", []string{"n1", "n2", "n3", "n4", "n5"}) {
				t.Fatalf("preferred leader %s is not the rendezvous owner", p.Replicas[0])
			}
		}},
		{"existing topic keeps its set even on dead members", dead, map[string][]string{"orders": {"n4", "n3", "n1"}},
			[]PlacementRequest{{"orders", 3}}, func(t *testing.T, ps []Placement) {
				if p := ps[0]; p.Err != nil || !p.Existing || !slices.Equal(p.Replicas, []string{"n4", "n3", "n1"}) {
					t.Fatalf("%+v", p)
				}
			}},
		{"dead members take no new replicas", dead, nil, []PlacementRequest{{"a", 2}, {"b", 2}, {"c", 2}}, func(t *testing.T, ps []Placement) {
			for _, p := range ps {
				if p.Err != nil || slices.Contains(p.Replicas, "n3") || slices.Contains(p.Replicas, "n4") {
					t.Fatalf("%+v", p)
				}
			}
		}},
		{"too few eligible members is refused, not shrunk", dead, nil, []PlacementRequest{{"orders", 3}}, func(t *testing.T, ps []Placement) {
			if p := ps[0]; !errors.Is(p.Err, ErrTooFewMembers) || p.Replicas != nil {
				t.Fatalf("%+v", p)
			}
			if got := ps[0].Err.Error(); got != `routing: place "orders": routing: too few members for the replicas: 3 requested, 2 eligible ([n1 n2])` {
				t.Fatalf("error %q", got)
			}
		}},
		{"replica count mismatch", five, map[string][]string{"orders": {"n1"}}, []PlacementRequest{{"orders", 3}}, func(t *testing.T, ps []Placement) {
			if !errors.Is(ps[0].Err, ErrReplicasMismatch) {
				t.Fatalf("%+v", ps[0])
			}
		}},
		{"invalid requests", five, nil, []PlacementRequest{{"bad..topic", 3}, {"ok", 0}, {"ok", -1}}, func(t *testing.T, ps []Placement) {
			if !errors.Is(ps[0].Err, ErrInvalidTopic) || !errors.Is(ps[1].Err, ErrInvalidReplicas) || !errors.Is(ps[2].Err, ErrInvalidReplicas) {
				t.Fatalf("%+v", ps)
			}
		}},
		{"a repeated request sees the first one's set", five, nil, []PlacementRequest{{"t", 3}, {"t", 3}, {"t", 2}}, func(t *testing.T, ps []Placement) {
			if ps[0].Err != nil || !ps[1].Existing || !slices.Equal(ps[0].Replicas, ps[1].Replicas) || !errors.Is(ps[2].Err, ErrReplicasMismatch) {
				t.Fatalf("%+v", ps)
			}
		}},
		{"duplicate and empty member IDs are ignored", append(placeMembers("n1", "n1", ""), PlacementMember{ID: "n2", Eligible: true}),
			nil, []PlacementRequest{{"t", 2}, {"u", 3}}, func(t *testing.T, ps []Placement) {
				if ps[0].Err != nil || len(ps[0].Replicas) != 2 || !errors.Is(ps[1].Err, ErrTooFewMembers) {
					t.Fatalf("%+v", ps)
				}
			}},
		{"no members", nil, nil, []PlacementRequest{{"t", 1}}, func(t *testing.T, ps []Placement) {
			if !errors.Is(ps[0].Err, ErrTooFewMembers) {
				t.Fatalf("%+v", ps)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := Place(tc.members, tc.holdings, tc.reqs)
			if len(ps) != len(tc.reqs) {
				t.Fatalf("%d answers to %d requests", len(ps), len(tc.reqs))
			}
			tc.check(t, ps)
		})
	}
}

// TestPlaceOrderIndependentAndStable: shuffling members changes nothing;
// a member joining takes replicas of new topics only where it now ranks in
// the top R, and moves no existing topic.
func TestPlaceOrderIndependentAndStable(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 13))
	ids := []string{"n1", "n2", "n3", "n4", "n5", "n6"}
	var reqs []PlacementRequest
	for i := range 300 {
		reqs = append(reqs, PlacementRequest{fmt.Sprintf("t%d", i), 3})
	}
	base := Place(placeMembers(ids...), nil, reqs)
	shuffled := slices.Clone(ids)
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	again := Place(placeMembers(shuffled...), nil, reqs)
	holdings := map[string][]string{}
	count := map[string]int{}
	for i := range base {
		if base[i].Err != nil || !slices.Equal(base[i].Replicas, again[i].Replicas) {
			t.Fatalf("%s: %v with members in order, %v shuffled", reqs[i].Topic, base[i].Replicas, again[i].Replicas)
		}
		holdings[reqs[i].Topic] = base[i].Replicas
		for _, m := range base[i].Replicas {
			count[m]++
		}
	}
	// 900 replicas over 6 members: 150 each on average.
	for _, id := range ids {
		if count[id] < 100 || count[id] > 200 {
			t.Fatalf("member %s holds %d of 900 replicas: %v", id, count[id], count)
		}
	}
	joined := Place(placeMembers(append(ids, "n7")...), holdings, reqs)
	for i, p := range joined {
		if !p.Existing || !slices.Equal(p.Replicas, base[i].Replicas) {
			t.Fatalf("%s moved after n7 joined: %v -> %v", reqs[i].Topic, base[i].Replicas, p.Replicas)
		}
	}
	// For new topics, n7's arrival changes a set only by bringing n7 in.
	var fresh []PlacementRequest
	for i := range 300 {
		fresh = append(fresh, PlacementRequest{fmt.Sprintf("new%d", i), 3})
	}
	before := Place(placeMembers(ids...), nil, fresh)
	after := Place(placeMembers(append(ids, "n7")...), nil, fresh)
	for i := range fresh {
		var diff []string
		for _, m := range after[i].Replicas {
			if !slices.Contains(before[i].Replicas, m) {
				diff = append(diff, m)
			}
		}
		if len(diff) > 1 || len(diff) == 1 && diff[0] != "n7" {
			t.Fatalf("%s: %v -> %v: more than n7 changed", fresh[i].Topic, before[i].Replicas, after[i].Replicas)
		}
	}
}
