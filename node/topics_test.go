package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/quicmq/quicmq/client"
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

// A listing seeks the log from its pattern's literal prefix: every topic the pattern
// matches starts with it.
func TestLiteralPrefix(t *testing.T) {
	for _, c := range []struct{ pattern, want string }{
		{">", ""}, {"*", ""}, {"*.a", ""}, {"a", "a"}, {"a.b", "a.b"}, {"a.>", "a."},
		{"a.*.c", "a."}, {"a.b.*", "a.b."}, {"ab-c_d.*.>", "ab-c_d."},
	} {
		if got := literalPrefix(c.pattern); got != c.want {
			t.Errorf("literalPrefix(%q) = %q, want %q", c.pattern, got, c.want)
		}
	}
}

// A listing streams page after page of the log in name order: more topics than a page,
// under a pattern with a literal prefix and one without, each listed once and sorted, and a
// client that stops reading half-way ends only its own listing.
func TestListingStreamsPages(t *testing.T) {
	n := newTestNode(t)
	conn := dialNode(t, n, client.Options{})
	defer conn.Close()
	ctx := context.Background()
	var want []string
	var futures []*client.Future
	for i := range 2*listPage + 37 {
		for _, p := range []string{"a", "b"} {
			name := fmt.Sprintf("%s.t%05d", p, i)
			f, err := conn.PublishAsync(ctx, client.Message{Topic: name, Payload: []byte("x")})
			if err != nil {
				t.Fatal(err)
			}
			futures = append(futures, f)
			if p == "b" {
				want = append(want, name)
			}
		}
	}
	for _, f := range futures {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, pattern := range []string{"b.>", "*.*"} {
		list, err := conn.Topics(ctx, pattern)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ti := range list {
			if strings.HasPrefix(ti.Name, "b.") {
				got = append(got, ti.Name)
			}
			if ti.Next != 1 || ti.Leader != n.Name() || len(ti.Replicas) != 1 {
				t.Fatalf("%s: row %+v", pattern, ti)
			}
		}
		if !slices.Equal(got, want) || pattern == "*.*" && len(list) != 2*len(want) {
			t.Fatalf("%s: %d rows (%d of b.), want %d of b.", pattern, len(list), len(got), len(want))
		}
	}
	stop := errors.New("enough")
	seen := 0
	err := conn.TopicsEach(ctx, ">", func(client.TopicInfo) error {
		if seen++; seen == 10 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || seen != 10 {
		t.Fatalf("a listing its reader ended: %d rows, %v", seen, err)
	}
	if list, err := conn.Topics(ctx, "a.t00001"); err != nil || len(list) != 1 {
		t.Fatalf("a literal pattern after an ended listing: %+v %v", list, err)
	}
}
