package manage

import (
	"context"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"
	"github.com/quicmq/quicmq/wal"
)

// fakeLocal is a node with the given consumers, peers that answer a listing with theirs,
// and topics owned by other nodes: what Manager composes, without a node.
type fakeLocal struct {
	here    []Consumer
	peers   map[string][]*wire.ConsumerInfo
	owner   string // of every topic; "" this node
	asked   []string
	created []string
	region  string
	repl    bool
}

func (f *fakeLocal) Consumers(a *auth.Principal, name string) ([]Consumer, *wire.Error) {
	var out []Consumer
	for _, c := range f.here {
		if name == "" || c.Name == name {
			out = append(out, c)
		}
	}
	if name != "" && len(out) == 0 {
		return nil, wire.Errorf(wire.CodeNotFound, "no consumer %q", name)
	}
	return out, nil
}

func (f *fakeLocal) ResetConsumer(context.Context, *auth.Principal, string, wire.StartKind, uint64, bool) (Consumer, *wire.Error) {
	return Consumer{}, wire.Errorf(wire.CodeInternal, "not in this test")
}

func (f *fakeLocal) DeleteConsumer(context.Context, *auth.Principal, string, bool) (int, *wire.Error) {
	return 0, wire.Errorf(wire.CodeInternal, "not in this test")
}

func (f *fakeLocal) CheckMembers(_ context.Context, _ *auth.Principal, c Consumer, op string, force bool) *wire.Error {
	if c.Members > 0 && !force {
		return wire.Errorf(wire.CodeInUse, "%s has members", c.Name)
	}
	return nil
}

func (f *fakeLocal) CreateTopic(_ context.Context, _ *auth.Principal, stored string, _ wal.TopicConfig, _ bool) (wire.TopicInfo, *wire.Error) {
	f.created = append(f.created, stored)
	return wire.TopicInfo{Name: stored}, nil
}

func (f *fakeLocal) RemoveTopic(context.Context, *auth.Principal, string, byte, bool) (uint64, *wire.Error) {
	return 0, nil
}

func (f *fakeLocal) RemoveReplicated(Request, string, *wire.TopicRemove) (uint64, bool, *wire.Error) {
	return 0, false, nil
}

func (f *fakeLocal) Owner(context.Context, string) (string, *wire.Error) { return f.owner, nil }

func (f *fakeLocal) AskRegion(ctx context.Context, req wire.Frame, fn func(wire.Frame) error) *wire.Error {
	for node := range f.peers {
		if e := f.AskNode(ctx, node, req, fn); e != nil {
			return e
		}
	}
	return nil
}

func (f *fakeLocal) AskNode(_ context.Context, node string, req wire.Frame, fn func(wire.Frame) error) *wire.Error {
	f.asked = append(f.asked, node+":"+req.Type().String())
	if ti, ok := req.(*wire.TopicCreate); ok {
		if err := fn(&wire.TopicInfo{Name: ti.Topic, Leader: node}); err != nil {
			return wire.Errorf(wire.CodeInternal, "%v", err)
		}
		return nil
	}
	for _, ci := range f.peers[node] {
		if err := fn(ci); err != nil {
			return wire.Errorf(wire.CodeInternal, "%v", err)
		}
	}
	return nil
}

func (f *fakeLocal) Replicated() (string, bool) { return f.region, f.repl }

func manager(f *fakeLocal, a *auth.Principal) *Manager {
	return &Manager{Request: Request{Ctx: context.Background(), A: a}, Local: f, Region: true}
}

// TestGatherCountsAReplicatedRowOnce: a durable's row of a replicated topic is on each of
// the topic's replicas; the region's listing counts it once, from the node where the
// consumer is live, else the one stored last, and adds the topics only one node has.
func TestGatherCountsAReplicatedRowOnce(t *testing.T) {
	t0 := time.Unix(1000, 0)
	f := &fakeLocal{
		here: []Consumer{{Name: "d", Kind: wire.KindDurable, Pending: 5, LastAck: t0,
			Topics: []wire.ConsumerTopic{{Topic: "t", Resume: 10, Next: 15, Pending: 5, Updated: t0.UnixNano()}}}},
		peers: map[string][]*wire.ConsumerInfo{
			// Live on n2 (a member there), with an older row: it stands for the topic.
			"n2": {{Name: "d", Kind: wire.KindDurable, Members: 1, Pending: 3,
				Topics: []wire.ConsumerTopic{{Topic: "t", Resume: 12, Next: 15, Pending: 3, Updated: t0.Add(-time.Second).UnixNano()}}}},
			// Only n3 holds topic u.
			"n3": {{Name: "d", Kind: wire.KindDurable, Pending: 7,
				Topics: []wire.ConsumerTopic{{Topic: "u", Resume: 0, Next: 7, Pending: 7, Updated: t0.UnixNano()}}}},
		},
	}
	cs, e := manager(f, auth.Everything).Consumers("d")
	if e != nil {
		t.Fatal(e)
	}
	if len(cs) != 1 {
		t.Fatalf("%d consumers, want 1: %+v", len(cs), cs)
	}
	c := cs[0]
	if c.Pending != 3+7 || c.Members != 1 || len(c.Topics) != 2 || c.Topics[0].Resume != 12 || c.Topics[1].Topic != "u" {
		t.Fatalf("merged %+v: want t's row from the live node (resume 12), u's from n3, pending 10, 1 member", c)
	}
	if e := f.CheckMembers(context.Background(), auth.Everything, c, "reset", false); e == nil || e.Code != wire.CodeInUse {
		t.Fatalf("a live consumer's reset without force: %v, want CodeInUse", e)
	}
}

// TestManagerNamesAndPlaces: a client's consumer name is checked and mapped into its
// tenant's namespace; a mirror cursor is never a consumer; a topic request goes to the
// topic's owner; replicas asked of a region that keeps one copy are refused naming it.
func TestManagerNamesAndPlaces(t *testing.T) {
	f := &fakeLocal{region: "eu"}
	acme := auth.NewPrincipal("c", auth.Credential{Tenant: "acme"})
	m := manager(f, acme)
	for _, bad := range []string{"a/b", "mirror/us", "x y"} {
		if _, e := m.Consumers(bad); e == nil || e.Code != wire.CodeInvalidArgument {
			t.Errorf("consumer name %q: %v, want CodeInvalidArgument", bad, e)
		}
	}
	if _, e := m.Consumers("d"); e == nil || e.Code != wire.CodeNotFound || e.Message != `no consumer "d": no durable consumer position or group state of that name is stored in this region` {
		t.Errorf("an unknown consumer: %v", e)
	}
	if _, e := m.CreateTopic(&wire.TopicCreate{Topic: "x", Replicas: 3}); e == nil || e.Code != wire.CodeInvalidArgument {
		t.Errorf("3 replicas in a single-copy region: %v, want CodeInvalidArgument", e)
	}
	if ti, e := m.CreateTopic(&wire.TopicCreate{Topic: "x"}); e != nil || ti.Name != "x" || len(f.created) != 1 || f.created[0] != "acme.x" {
		t.Errorf("created here: %+v %v (stored %v), want x as the client names it, acme.x stored", ti, e, f.created)
	}
	f.owner = "n2"
	if ti, e := m.CreateTopic(&wire.TopicCreate{Topic: "y"}); e != nil || ti.Leader != "n2" || ti.Name != "y" || len(f.asked) != 1 {
		t.Errorf("a topic owned by n2: %+v %v (asked %v), want it created there", ti, e, f.asked)
	}
}
