package manage

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"
	"github.com/quicmq/quicmq/node/groups"
	"github.com/quicmq/quicmq/node/subscriptions"
	"github.com/quicmq/quicmq/wal"
)

// noGroups is a node with no live group.
type noGroups struct{ fenced []string }

func (noGroups) Group(string) *groups.Group { return nil }
func (noGroups) All() []*groups.Group       { return nil }
func (g *noGroups) Fence(name, op string) (func(), *wire.Error) {
	g.fenced = append(g.fenced, name)
	return func() {}, nil
}

// newTestHere is this node's side of management over a log of its own, with no
// subscriptions or groups live and nothing replicated.
func newTestHere(t *testing.T) (*Here, *wal.Log, *[]string) {
	t.Helper()
	l, err := wal.Open(filepath.Join(t.TempDir(), "log"), wal.Options{Logger: slog.New(slog.DiscardHandler), RetentionInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var forgot []string
	h := NewHere(HereConfig{
		Name: "n1", Region: "eu", Log: slog.New(slog.DiscardHandler), Wal: l, MaxDurablesPerTenant: 1,
		Subscriptions:        func() []*subscriptions.Subscription { return nil },
		Groups:               &noGroups{},
		ReplicatedGroupTopic: func(string) bool { return false },
		Holders:              func(string) (string, []string) { return "", nil },
		ForgetTopic:          func(topic string) { forgot = append(forgot, topic) },
	})
	return h, l, &forgot
}

// TestHereOverALogAlone: a node's consumers and topics are listed, refused and removed from
// its log alone, without a node: a durable is listed with its pending records and a mirror
// cursor is not; a purge is refused while either has a position, naming both; a forced
// delete removes the topic and forgets its series; a group may not take a durable's name.
func TestHereOverALogAlone(t *testing.T) {
	h, l, forgot := newTestHere(t)
	ctx := context.Background()
	recs := make([]wal.Record, 5)
	for i := range recs {
		recs[i].Payload = []byte("r")
	}
	if r := l.Append(ctx, wal.AppendRequest{Topic: "orders", Records: recs}); r.Err != nil {
		t.Fatal(r.Err)
	}
	for _, name := range []string{"d1", "mirror/us"} {
		if err := l.SetPosition(ctx, wal.Position{Name: name, Topic: "orders", Value: 1}); err != nil {
			t.Fatal(err)
		}
	}
	cs, e := h.Consumers(auth.Everything, "")
	if e != nil || len(cs) != 1 || cs[0].Name != "d1" || cs[0].Kind != wire.KindDurable || cs[0].Pending != 3 {
		t.Fatalf("consumers: %+v %v, want d1 alone with 3 pending", cs, e)
	}
	_, e = h.RemoveTopic(ctx, auth.Everything, "orders", wire.RemovePurge, false)
	if e == nil || e.Code != wire.CodeInUse || !strings.Contains(e.Message, `durable consumer "d1"`) || !strings.Contains(e.Message, `mirror cursor of region "us"`) {
		t.Fatalf("purge with dependents: %v, want CodeInUse naming both", e)
	}
	if e := h.CheckNewGroup(auth.Everything, "d1"); e == nil || e.Code != wire.CodeConflict {
		t.Fatalf("a group named as a durable: %v, want CodeConflict", e)
	}
	if n, e := h.DeleteConsumer(ctx, auth.Everything, "d1", false); e != nil || n != 1 {
		t.Fatalf("delete d1: %d %v, want 1 position", n, e)
	}
	records, e := h.RemoveTopic(ctx, auth.Everything, "orders", wire.RemoveDelete, true)
	if e != nil || records != 5 || !slices.Equal(*forgot, []string{"orders"}) {
		t.Fatalf("forced delete: %d records %v, forgot %v; want 5 and [orders]", records, e, *forgot)
	}
	if _, e := h.RemoveTopic(ctx, auth.Everything, "orders", wire.RemovePurge, true); e == nil || e.Code != wire.CodeNotFound {
		t.Fatalf("purge of a deleted topic: %v, want CodeNotFound", e)
	}
}
