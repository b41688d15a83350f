package node

// Sentences of docs/protocol.md checked on the wire, one test each, named after what the
// document says. A client written from the document alone relies on them.

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/wire"
)

// TestAckInsideGapIsTaken: "An ACK is wrong when ... offset is not below the offset after the
// last record (or GAP) of that topic sent on it." A durable whose remaining records were all
// deleted acknowledges inside the GAP, and so stores a position past them: it is not sent
// the same GAP again when it resumes.
func TestAckInsideGapIsTaken(t *testing.T) {
	// A literal subscription reads its topic with a cursor of its own, a wildcard by sweep
	// (sweep.go): both send the GAP.
	for _, pattern := range []string{"gap.t", "gap.>"} {
		t.Run(pattern, func(t *testing.T) { ackInsideGap(t, pattern) })
	}
}

func ackInsideGap(t *testing.T, pattern string) {
	n := newTestNode(t)
	rc := mustDial(t, n)
	publishN(t, rc, "gap.t", 0, 6)

	// The durable acknowledges offsets 0 and 1, and its stream ends with the position stored.
	s := subscribe(t, rc, &wire.Subscribe{Pattern: pattern, Durable: "d"})
	readRecords(t, s, 6)
	s.send(&wire.Ack{Index: 0, Offset: 1})
	s.str.Close()
	drainToEOF(t, s)

	// Records 2-5 go: the resumed durable is sent GAP [2, 6) and nothing else.
	if f := rc.open(&wire.TopicRemove{Topic: "gap.t", Op: wire.RemovePurge, Flags: wire.ManageForce}).next(); f.Type() != wire.TypeDone {
		t.Fatalf("purge: got %s %+v", f.Type(), f)
	}
	s = subscribe(t, rc, &wire.Subscribe{Pattern: pattern, Durable: "d"})
	if f := s.next(); f.Type() != wire.TypeTopic {
		t.Fatalf("after SUBSCRIBED: got %s %+v, want TOPIC", f.Type(), f)
	}
	if g, ok := s.next().(*wire.Gap); !ok || g.From != 2 || g.To != 6 {
		t.Fatalf("want GAP [2, 6), got %+v", g)
	}
	s.send(&wire.Ack{Index: 0, Offset: 5}, &wire.Commit{Seq: 1})
	switch f := s.next().(type) {
	case *wire.Committed:
	case *wire.ErrorFrame:
		t.Fatalf("ACK 5 inside GAP [2, 6): %v", f.AsError())
	default:
		t.Fatalf("after ACK and COMMIT: got %s %+v", f.Type(), f)
	}
	s.str.Close()
	drainToEOF(t, s)

	// Resumed again, the durable is at the head: CAUGHT_UP, no GAP.
	s = subscribe(t, rc, &wire.Subscribe{Pattern: pattern, Durable: "d", Flags: wire.SubscribeCaughtUp})
	if f := s.next(); f.Type() != wire.TypeCaughtUp {
		t.Fatalf("resumed after the gap: got %s %+v, want CAUGHT_UP", f.Type(), f)
	}
}

// drainToEOF reads s until the node's FIN, failing on an ERROR.
func drainToEOF(t *testing.T, s *rawStream) {
	t.Helper()
	for {
		f, err := s.read(10 * time.Second)
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("waiting for the node's FIN: %v", err)
		}
		if e, ok := f.(*wire.ErrorFrame); ok {
			t.Fatalf("waiting for the node's FIN: %v", e.AsError())
		}
	}
}

// TestGroupPendingIsLive: CONSUMER_INFO's pending is "the records not yet acknowledged (those
// never handed out ... plus the outstanding ones)", and outstanding the records handed to
// members and not yet acknowledged: what the group holds now, not what it last stored.
func TestGroupPendingIsLive(t *testing.T) {
	n := newTestNode(t)
	c := dialNode(t, n, client.Options{})
	ctx := context.Background()
	managePublish(t, c, "live.t", 5)
	member := joinGroup(t, c, "live.t", client.SubscribeOptions{Group: "g"})
	recs := manageRead(t, member, 5) // delivered, none acknowledged: the group stored nothing

	check := func(when string, pending, outstanding uint64) {
		t.Helper()
		info, err := c.ConsumerInfo(ctx, "g")
		if err != nil || len(info.Topics) != 1 || info.Pending != pending || info.Topics[0].Pending != pending ||
			info.Group == nil || info.Group.Outstanding != outstanding || info.Topics[0].Outstanding != outstanding {
			t.Fatalf("%s: %+v (group %+v) %v; want one row, %d pending, %d outstanding", when, info, info.Group, err, pending, outstanding)
		}
	}
	check("5 delivered, none acknowledged", 5, 5)

	if err := member.Ack(recs[0]); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := member.Commit(cctx); err != nil { // stored: 4 outstanding
		t.Fatal(err)
	}
	managePublish(t, c, "live.t", 3)
	manageRead(t, member, 3)
	check("1 acknowledged, 3 more delivered", 7, 7)
}

// TestReplicatedConsumerRowsCountedOnce: "the listing merges them by name (pending and
// members summed)" sums over the nodes of a region, yet a replicated topic's consumer state
// is on each of its replicas: each topic's row counts once, in a listing as in an info,
// and a live group's row is its live state.
func TestReplicatedConsumerRowsCountedOnce(t *testing.T) {
	m := newReplicatedRegion(t)
	c := m.dial("eu-1")
	ctx := context.Background()
	managePublish(t, c, "once.t", 10)
	consumeAndAck(t, c, "once.t", "d", 4) // durable d: 6 pending
	member := joinGroup(t, c, "once.t", client.SubscribeOptions{Group: "g"})
	readAckGroup(t, member, 10, 3) // group g: 7 pending, 7 outstanding

	want := map[string]uint64{"d": 6, "g": 7}
	for name, pending := range want {
		info, err := c.ConsumerInfo(ctx, name)
		if err != nil || len(info.Topics) != 1 || info.Pending != pending || info.Topics[0].Pending != pending {
			t.Fatalf("info %s: %+v %v; want one row of once.t, %d pending", name, info, err, pending)
		}
		if name == "g" && (info.Group == nil || info.Group.Outstanding != 7 || info.Topics[0].Outstanding != 7) {
			t.Fatalf("info g: %+v; want 7 outstanding", info.Group)
		}
	}
	list, err := c.Consumers(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("listing: %+v %v; want d and g", list, err)
	}
	for _, ci := range list {
		if ci.Pending != want[ci.Name] {
			t.Fatalf("listing row %s: %d pending, want %d", ci.Name, ci.Pending, want[ci.Name])
		}
	}
}

// TestTopicInfoOneRule: TOPIC_CREATE's answer and a listing's row are the same TOPIC_INFO,
// every field written: retention (0/0 and flags 0 without retention of its own), flags,
// leader and replicas.
func TestTopicInfoOneRule(t *testing.T) {
	n := newTestNode(t)
	rc := mustDial(t, n)
	for _, create := range []*wire.TopicCreate{
		{Topic: "info.plain"},
		{Topic: "info.kept", Flags: wire.ManageRetention, MaxAge: uint64(time.Hour), MaxBytes: 1 << 20},
	} {
		s := rc.open(create)
		s.str.Close()
		created, ok := s.next().(*wire.TopicInfo)
		if !ok {
			t.Fatalf("TOPIC_CREATE %s: no TOPIC_INFO", create.Topic)
		}
		body := wire.Append(nil, created)
		s = rc.open(&wire.Topics{Pattern: create.Topic})
		s.str.Close()
		listed, ok := s.next().(*wire.TopicInfo)
		if !ok {
			t.Fatalf("TOPICS %s: no TOPIC_INFO", create.Topic)
		}
		if got := wire.Append(nil, listed); string(got) != string(body) {
			t.Fatalf("%s: TOPIC_CREATE answered %+v, the listing %+v: want the same frame", create.Topic, created, listed)
		}
		if created.Leader != n.Name() || len(created.Replicas) != 1 || created.Replicas[0] != n.Name() {
			t.Fatalf("%s: leader %q replicas %v; want this node for both", create.Topic, created.Leader, created.Replicas)
		}
		if created.RetentionSet != (create.Flags&wire.ManageRetention != 0) {
			t.Fatalf("%s: retention flag %v", create.Topic, created.RetentionSet)
		}
	}
}

// TestFirstFrameCodes: a node-to-node stream's first frame (WATCH, MIRROR, RAFT, HOLD,
// GROUP_STORE) on a client's connection is ERROR 3; a frame that starts no stream (one the
// node sends, or one that only follows another on a stream) is ERROR 1; the connection goes on.
func TestFirstFrameCodes(t *testing.T) {
	n := newTestNode(t)
	rc := mustDial(t, n)
	for _, c := range []struct {
		f    wire.Frame
		code wire.Code
	}{
		{&wire.Watch{Patterns: []string{">"}}, wire.CodeForbidden},
		{&wire.Mirror{Topic: "a"}, wire.CodeForbidden},
		{&wire.Raft{From: 1, To: 2}, wire.CodeForbidden},
		{&wire.Hold{Name: "d", Shown: "d", Client: "c"}, wire.CodeForbidden},
		{&wire.GroupStore{Topic: "a", Entry: []byte{1}}, wire.CodeForbidden},
		{&wire.Hello{Version: wire.Version}, wire.CodeProtocol},
		{&wire.Head{Next: 1}, wire.CodeProtocol},
		{&wire.Position{Durable: "d", Origins: []wire.OriginOffset{{Region: "eu", Offset: 1}}}, wire.CodeProtocol},
		{&wire.GroupPosition{Group: "g"}, wire.CodeProtocol},
		{&wire.RaftBatch{Batch: []byte{0}}, wire.CodeProtocol},
		{&wire.RaftFetchReq{Group: 1, Log: "a", To: 1, MaxBytes: 1}, wire.CodeProtocol},
		{&wire.RaftChunk{Next: 1}, wire.CodeProtocol},
		{&wire.Held{}, wire.CodeProtocol},
		{&wire.Ack{}, wire.CodeProtocol},
		{&wire.Subscribed{}, wire.CodeProtocol},
	} {
		if e := rc.open(c.f).expectError(); e.Code != c.code {
			t.Errorf("first frame %s: %v; want code %d", c.f.Type(), e, c.code)
		}
	}
	publishN(t, rc, "still.up", 0, 1) // the connection went on
}

// TestStandbyWithoutDurableIgnored: the standby bit means nothing without a durable.
func TestStandbyWithoutDurableIgnored(t *testing.T) {
	n := newTestNode(t)
	rc := mustDial(t, n)
	publishN(t, rc, "sb.t", 0, 2)
	a := subscribe(t, rc, &wire.Subscribe{Pattern: "sb.t", Flags: wire.SubscribeStandby})
	b := subscribe(t, rc, &wire.Subscribe{Pattern: "sb.t", Flags: wire.SubscribeStandby})
	readRecords(t, a, 2)
	readRecords(t, b, 2)
}

// TestDeletedSingleCopyTopicStartsAgainAtZero: after a delete, the next publish to the name
// creates the topic anew, at offset 0.
func TestDeletedSingleCopyTopicStartsAgainAtZero(t *testing.T) {
	n := newTestNode(t)
	rc := mustDial(t, n)
	publishN(t, rc, "del.t", 0, 3)
	if f := rc.open(&wire.TopicRemove{Topic: "del.t", Op: wire.RemoveDelete}).next(); f.Type() != wire.TypeDone {
		t.Fatalf("delete: got %s %+v", f.Type(), f)
	}
	if offs := publishN(t, rc, "del.t", 3, 1); offs[0] != 0 {
		t.Fatalf("first publish after the delete got offset %d, want 0", offs[0])
	}
}

// TestVectorPastHeadSkipsSilently: a vector past a topic's head covers the records that come
// later up to it: they are skipped without a GAP or any other frame.
func TestVectorPastHeadSkipsSilently(t *testing.T) {
	n := newTestNode(t)
	rc := mustDial(t, n)
	publishN(t, rc, "vec.t", 0, 2) // head 2
	s := subscribe(t, rc, &wire.Subscribe{Pattern: "vec.t", Flags: wire.SubscribeVector | wire.SubscribeCaughtUp,
		Vector: []wire.TopicVector{{Topic: "vec.t", Origins: []wire.OriginOffset{{Region: n.cfg.Region, Offset: 4}}}}})
	if f := s.next(); f.Type() != wire.TypeCaughtUp {
		t.Fatalf("got %s %+v, want CAUGHT_UP", f.Type(), f)
	}
	publishN(t, rc, "vec.t", 2, 4) // offsets 2-5: 2, 3 and 4 are covered
	if f := s.next(); f.Type() != wire.TypeTopic {
		t.Fatalf("got %s %+v, want TOPIC", f.Type(), f)
	}
	if r, ok := s.next().(*wire.Record); !ok || r.Offset != 5 {
		t.Fatalf("got %+v, want the RECORD of offset 5 next", r)
	}
}

// TestGroupMemberGetsRecordFrames: a group member that set SUBSCRIBE's bit 0 is still sent
// RECORD frames only (records of a topic may come out of offset order to a member).
func TestGroupMemberGetsRecordFrames(t *testing.T) {
	n := newTestNode(t)
	rc := mustDial(t, n)
	publishN(t, rc, "gr.t", 0, 20)
	s := subscribe(t, rc, &wire.Subscribe{Pattern: "gr.t", Flags: wire.SubscribeRecords | wire.SubscribeGroup, Group: &wire.Group{Name: "g"}})
	for got := 0; got < 20; {
		switch f := s.next().(type) {
		case *wire.Topic:
		case *wire.Record:
			got++
		default:
			t.Fatalf("after %d records: got %s %+v", got, f.Type(), f)
		}
	}
}

// TestGroupAndManageRefusalCodes: the codes protocol.md gives for a group's settings and
// for TOPIC_CREATE and TOPIC_REMOVE requests it refuses.
func TestGroupAndManageRefusalCodes(t *testing.T) {
	n := tenantNode(t)
	ctx := context.Background()
	acme := mustDialAs(t, n, acmeToken)
	managePublish(t, acme, "orders.eu", 1)
	for _, c := range []struct {
		what string
		opts client.SubscribeOptions
		code client.Code
	}{
		{"a dead-letter topic the pattern matches", client.SubscribeOptions{Group: "g1", DeadLetter: "orders.dlq"}, client.CodeInvalidArgument},
		{"a dead-letter topic outside the publish grant", client.SubscribeOptions{Group: "g2", DeadLetter: "audit.dlq"}, client.CodeForbidden},
	} {
		if _, err := acme.Subscribe(ctx, "orders.*", c.opts); codeOf(err) != c.code {
			t.Errorf("%s: %v; want code %d", c.what, err, c.code)
		}
	}
	// A later member's empty dead_letter takes the group's: no conflict.
	joinGroup(t, acme, "orders.*", client.SubscribeOptions{Group: "g3", DeadLetter: "orders.x.dlq"})
	joinGroup(t, acme, "orders.*", client.SubscribeOptions{Group: "g3"})

	rc, err := dialRaw(t, n, acmeToken)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		f    wire.Frame
		code wire.Code
	}{
		{"ack_wait over 86,400,000 ms", &wire.Subscribe{Pattern: "orders.*", Flags: wire.SubscribeGroup, Group: &wire.Group{Name: "g4", AckWait: 86_400_001 * time.Millisecond}}, wire.CodeProtocol},
		{"max_deliver over 2^20", &wire.Subscribe{Pattern: "orders.*", Flags: wire.SubscribeGroup, Group: &wire.Group{Name: "g5", MaxDeliver: 1<<20 + 1}}, wire.CodeProtocol},
		{"TOPIC_CREATE of a topic against the grammar", &wire.TopicCreate{Topic: "orders..eu"}, wire.CodeInvalidTopic},
		{"TOPIC_CREATE of a pattern", &wire.TopicCreate{Topic: "orders.*"}, wire.CodeInvalidTopic},
		{"TOPIC_REMOVE with op 3", &wire.TopicRemove{Topic: "orders.eu", Op: 3}, wire.CodeInvalidArgument},
		{"TOPIC_REMOVE of a topic against the grammar", &wire.TopicRemove{Topic: "orders..eu", Op: wire.RemovePurge}, wire.CodeInvalidTopic},
	} {
		s := rc.open(c.f)
		s.str.Close()
		if e := s.expectError(); e.Code != c.code {
			t.Errorf("%s: %v; want code %d", c.what, e, c.code)
		}
	}
}

// TestSDKAckGap: the Go client's durable acknowledges a GAP (Subscription.AckGap) and so
// stores a position past records deleted before it read them.
func TestSDKAckGap(t *testing.T) {
	n := newTestNode(t)
	c := dialNode(t, n, client.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	managePublish(t, c, "sdkgap.t", 6)
	consumeAndAck(t, c, "sdkgap.t", "d", 2) // position 1: resumes at 2
	if _, err := c.PurgeTopic(ctx, "sdkgap.t", client.ManageOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe(ctx, "sdkgap.t", client.SubscribeOptions{Durable: "d"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = sub.Next(ctx)
	gap, ok := errors.AsType[*client.GapError](err)
	if !ok || gap.From != 2 || gap.To != 6 {
		t.Fatalf("Next: %v; want a GapError [2, 6)", err)
	}
	if err := sub.AckGap(gap); err != nil {
		t.Fatal(err)
	}
	if err := sub.Close(); err != nil { // waits for the node's FIN: the ACK is stored
		t.Fatal(err)
	}
	info, err := c.ConsumerInfo(ctx, "d")
	if err != nil || len(info.Topics) != 1 || info.Topics[0].Resume != 6 || info.Pending != 0 {
		t.Fatalf("after AckGap: %+v %v; want d resuming at 6, nothing pending", info, err)
	}
}
