package subscriptions

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/quicmq/quicmq/wal"
)

// TestSortByID checks both ways sortByID orders a sweep's set-up (placed by ID when the IDs
// are dense, sorted when they are spread out), with the stored positions beside them or
// none, moving the entries in place.
func TestSortByID(t *testing.T) {
	rnd := rand.New(rand.NewPCG(35, 35))
	for _, withStored := range []bool{true, false} {
		for _, spread := range []uint32{1, 3, 1000} {
			for _, n := range []int{0, 1, 2, 17, 5000} {
				ids := make([]uint32, 0, n)
				seen := map[uint32]bool{}
				for len(ids) < n {
					id := 7 + rnd.Uint32N(uint32(n)*spread+1)
					if !seen[id] {
						seen[id] = true
						ids = append(ids, id)
					}
				}
				ts := make([]wal.ListedTopic, n)
				stored := make([]uint64, n)
				minID, maxID := uint32(math.MaxUint32), uint32(0)
				for i, id := range ids {
					ts[i] = wal.ListedTopic{ID: id, First: uint64(id) * 10}
					stored[i] = uint64(id) * 100
					minID, maxID = min(minID, id), max(maxID, id)
				}
				if !withStored {
					stored = nil
				}
				got := sortByID(ts, stored, minID, maxID)
				if len(got) != n || !slices.IsSortedFunc(got, func(a, b wal.ListedTopic) int { return int(a.ID) - int(b.ID) }) {
					t.Fatalf("spread %d, %d topics: not sorted by ID", spread, n)
				}
				for i := range got {
					if got[i].First != uint64(got[i].ID)*10 || (stored != nil && stored[i] != uint64(got[i].ID)*100) {
						t.Fatalf("spread %d, %d topics: entry %d (ID %d) has First %d, stored %v", spread, n, i, got[i].ID, got[i].First, stored)
					}
				}
			}
		}
	}
}
