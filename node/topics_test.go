package node

import (
	"fmt"
	"testing"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/routing"
)

// TestKeepListedRow: the decision of which other node's row a listing keeps, each topic once.
func TestKeepListedRow(t *testing.T) {
	replicated := &wire.TopicInfo{Name: "r.t", Replicas: []string{"a", "b", "c"}}
	single := func(name, node string) *wire.TopicInfo {
		return &wire.TopicInfo{Name: name, Replicas: []string{node}}
	}
	for _, c := range []struct {
		what    string
		t       *wire.TopicInfo
		node    string
		listed  bool
		holders []string
		want    bool
	}{
		{"a replicated topic no catalog names yet", replicated, "b", false, nil, true},
		{"a replicated topic the catalogs name", replicated, "b", false, []string{"a", "b", "c"}, true},
		{"a replicated topic named by another replica's row", replicated, "c", true, []string{"a", "b", "c"}, false},
		{"a replicated topic listed from this node's log", replicated, "b", true, []string{"a", "b", "c", "here"}, false},
		{"a single-copy topic no catalog names yet", single("s.t", "b"), "b", false, nil, true},
		{"a single-copy topic its holder's catalog names", single("s.t", "b"), "b", false, []string{"b"}, true},
		{"a single-copy topic listed already", single("s.t", "b"), "b", true, []string{"b"}, false},
	} {
		if got := keepListedRow(c.t, c.node, c.listed, c.holders); got != c.want {
			t.Errorf("%s (row from %s, listed %v, holders %v): kept %v, want %v", c.what, c.node, c.listed, c.holders, got, c.want)
		}
	}

	// Two logs under one name (a conflict): of the rows of its two holders, the one
	// routing.Owner picks is kept, whether or not the catalogs name the other yet.
	for i := range 8 {
		name := fmt.Sprintf("conflict.t%d", i)
		served := routing.Owner(name, []string{"a", "b"})
		for _, holders := range [][]string{{"a", "b"}, {"a"}, {"b"}} {
			kept := 0
			for _, node := range []string{"a", "b"} {
				keep := keepListedRow(single(name, node), node, false, holders)
				if keep && node != served && len(holders) == 2 {
					t.Errorf("%s on a and b, both in the catalogs: %s's row kept, but %s's copy is served", name, node, served)
				}
				if keep {
					kept++
				}
			}
			if kept == 0 {
				t.Errorf("%s on a and b, catalogs naming %v: neither row kept", name, holders)
			}
		}
	}
}
