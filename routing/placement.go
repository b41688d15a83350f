package routing

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// Errors of Place, wrapped in a Placement's Err with the topic named.
var (
	ErrTooFewMembers    = errors.New("routing: too few members for the replicas")
	ErrReplicasMismatch = errors.New("routing: topic exists with another replica count")
	ErrInvalidReplicas  = errors.New("routing: invalid replica count")
)

// PlacementMember is a node of the region as placement sees it.
type PlacementMember struct {
	ID string
	// Eligible says the member may take new replicas (it is alive and has
	// not left). A member that is not eligible keeps the replicas it holds.
	Eligible bool
}

// PlacementRequest asks for a topic with Replicas replicas.
type PlacementRequest struct {
	Topic    string
	Replicas int
}

// Placement is the answer to one request: the topic's replica set, in
// preference order (the first is the preferred leader), or Err.
type Placement struct {
	Topic    string
	Replicas []string
	Existing bool // the topic was already held; its replica set is unchanged
	Err      error
}

// Place decides the replica sets of the requested topics from the region's
// members and the current holdings (topic -> replica set). It is the pure
// decision that the region's metadata group applies, so that every replica
// of that group computes the same answer from the same inputs:
//
//   - A topic already held keeps its replica set, whoever joined, left or
//     failed since (I6: no existing log ever moves); a request for it with
//     another replica count is refused with ErrReplicasMismatch.
//   - A new topic gets the Replicas eligible members with the highest
//     rendezvous weight for it (the same hash as Owner), in descending
//     weight: independent of the order of members, and a member joining
//     takes only a share of new topics. Fewer eligible members than asked is
//     ErrTooFewMembers, never a smaller set.
//   - Requests are answered in order, and a topic placed by an earlier
//     request of the same call is then existing for later ones.
//
// Invalid topics, replica counts below 1, duplicate or empty member IDs are
// handled without panicking: the first two refuse the request, the last two
// are ignored.
func Place(members []PlacementMember, holdings map[string][]string, reqs []PlacementRequest) []Placement {
	var eligible []string
	seen := make(map[string]bool, len(members))
	for _, m := range members {
		if m.ID == "" || seen[m.ID] {
			continue
		}
		seen[m.ID] = true
		if m.Eligible {
			eligible = append(eligible, m.ID)
		}
	}
	placed := make(map[string][]string)
	out := make([]Placement, 0, len(reqs))
	for _, r := range reqs {
		p := Placement{Topic: r.Topic}
		out = append(out, p)
		res := &out[len(out)-1]
		if err := ValidateTopic(r.Topic); err != nil {
			res.Err = fmt.Errorf("routing: place %q: %w", r.Topic, err)
			continue
		}
		if r.Replicas < 1 {
			res.Err = fmt.Errorf("routing: place %q: %w: %d (at least 1)", r.Topic, ErrInvalidReplicas, r.Replicas)
			continue
		}
		cur, ok := placed[r.Topic]
		if !ok {
			cur, ok = holdings[r.Topic]
		}
		if ok {
			if len(cur) != r.Replicas {
				res.Err = fmt.Errorf("routing: place %q: %w: it has %d (%v), %d requested",
					r.Topic, ErrReplicasMismatch, len(cur), cur, r.Replicas)
				continue
			}
			res.Replicas, res.Existing = slices.Clone(cur), true
			continue
		}
		if len(eligible) < r.Replicas {
			res.Err = fmt.Errorf("routing: place %q: %w: %d requested, %d eligible (%v)",
				r.Topic, ErrTooFewMembers, r.Replicas, len(eligible), eligible)
			continue
		}
		res.Replicas = topByWeight(r.Topic, eligible, r.Replicas)
		placed[r.Topic] = res.Replicas
	}
	return out
}

// topByWeight returns the n members of highest rendezvous weight for topic,
// heaviest first; equal weights are ordered by ID.
func topByWeight(topic string, members []string, n int) []string {
	type mw struct {
		id string
		w  uint64
	}
	ws := make([]mw, len(members))
	for i, m := range members {
		ws[i] = mw{m, weight(m, topic)}
	}
	slices.SortFunc(ws, func(a, b mw) int {
		if c := cmp.Compare(b.w, a.w); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	ids := make([]string, n)
	for i := range ids {
		ids[i] = ws[i].id
	}
	return ids
}
