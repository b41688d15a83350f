package subscriptions

import (
	"context"
	"testing"
)

// A node without gossip serves every topic itself: no owner elsewhere, no move, no wildcard
// spread over other nodes, positions in its own log. New, spansRegion, ownerMoved,
// startOffset and storeAcks rely on each answer, since none asks which Region it has.
func TestSingleCopyWithoutGossipServesEverythingHere(t *testing.T) {
	s := SingleCopy{Name: "n1", Region: "eu"}
	if o, e := s.Owner(context.Background(), "orders", true); o != "" || e != nil {
		t.Fatalf("Owner = %q, %v; want this node", o, e)
	}
	if e := s.Moved("orders", "n2", true); e != nil {
		t.Fatalf("Moved = %v; want nil", e)
	}
	if s.Spread() {
		t.Fatal("Spread without gossip: a wildcard would look for other nodes")
	}
	if s.IsReplicated("orders") {
		t.Fatal("IsReplicated true on a single-copy node")
	}
	if e := s.PositionBarrier(context.Background(), "d", "orders"); e != nil {
		t.Fatalf("PositionBarrier = %v", e)
	}
	if e := s.SetPosition(context.Background(), "d", "orders", 1, nil); e == nil {
		t.Fatal("SetPosition stored a position of a single-copy topic through raft")
	}
}
