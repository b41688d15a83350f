package placement

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicmq/quicmq/federation"
	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/routing"
)

// members is a region's gossip as a test sets it.
type members map[string]gossip.Status

func (m members) RegionMembers(region string) []gossip.Member {
	var out []gossip.Member
	for name, st := range m {
		out = append(out, gossip.Member{Name: name, Region: region, Status: st})
	}
	return out
}

func (m members) MemberStatus(_, name string) gossip.Status {
	if st, ok := m[name]; ok {
		return st
	}
	return gossip.StatusLeft
}

func newTable(t *testing.T, ms members, local map[string]bool, up map[string]bool) *Table {
	t.Helper()
	tb := New(Config{
		Name: "a", Region: "eu", Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Gossip:    ms,
		HasLog:    func(topic string) bool { return local[topic] },
		Resync:    func() {},
		Connected: func(name string) bool { return up[name] },
	}, prometheus.NewRegistry())
	tb.wait = 50 * time.Millisecond
	return tb
}

// TestOwnerWaitsForCatalogs: a topic no node holds is placed by rendezvous over the members,
// but only once every live member's catalog has arrived; a holder's catalog decides at once.
func TestOwnerWaitsForCatalogs(t *testing.T) {
	ms := members{"a": gossip.StatusAlive, "b": gossip.StatusAlive, "c": gossip.StatusFailed}
	tb := newTable(t, ms, map[string]bool{}, map[string]bool{"b": true})
	b := federation.Peer{Name: "b", Region: "eu"}

	if _, ready, _ := tb.OwnerNow("orders.1"); ready {
		t.Fatal("ready before b's catalog arrived")
	}
	if _, e := tb.Owner(context.Background(), "orders.1"); e == nil || e.Code != wire.CodeUnavailable {
		t.Fatalf("Owner before the catalogs: %v, want unavailable", e)
	}
	tb.OnCatalog(b, "orders.2")
	if owner, ready, _ := tb.OwnerNow("orders.2"); !ready || owner != "b" {
		t.Fatalf("a topic b holds: owner %q ready %v", owner, ready)
	}
	changed := tb.Changed()
	tb.OnCatalogSynced(b)
	select {
	case <-changed:
	default:
		t.Fatal("a synced catalog did not signal a change")
	}
	owner, ready, _ := tb.OwnerNow("orders.1")
	want := routing.Owner("orders.1", []string{"a", "b", "c"}) // a failed member still owns its share
	if !ready || owner != want {
		t.Fatalf("owner %q ready %v, want %q", owner, ready, want)
	}
	// A failed owner makes its topics unavailable, naming it; a topic on a's own log is a's.
	for i := 0; ; i++ {
		topic := "t." + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if owner, _, _ := tb.OwnerNow(topic); owner == "c" {
			if _, e := tb.Owner(context.Background(), topic); e == nil || e.Code != wire.CodeUnavailable {
				t.Fatalf("a topic of failed c: %v", e)
			}
			break
		}
	}
}

// TestConflicts: two holders of one topic are a conflict, counted and routed to one of them.
func TestConflicts(t *testing.T) {
	ms := members{"a": gossip.StatusAlive, "b": gossip.StatusAlive}
	local := map[string]bool{"orders.1": true}
	tb := newTable(t, ms, local, map[string]bool{"b": true})
	tb.OnCatalog(federation.Peer{Name: "b", Region: "eu"}, "orders.1")
	tb.OnCatalog(federation.Peer{Name: "x", Region: "us"}, "orders.1") // another region: not a holder
	got := tb.Conflicts()
	if !slices.Equal(got["orders.1"], []string{"a", "b"}) || len(got) != 1 {
		t.Fatalf("conflicts %v", got)
	}
	serving := routing.Owner("orders.1", []string{"a", "b"})
	if tb.ServedElsewhere("orders.1") != (serving != "a") {
		t.Fatalf("ServedElsewhere disagrees with the serving holder %q", serving)
	}
}
