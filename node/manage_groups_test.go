package node

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/node/manage"
	"github.com/quicmq/quicmq/wal"
)

// readAckGroup reads count records of a group member, acknowledges the first acks of them
// and commits, so the group's state is stored when it returns.
func readAckGroup(t *testing.T, sub *client.Subscription, count, acks int) []client.Record {
	t.Helper()
	recs := manageRead(t, sub, count)
	for _, r := range recs[:acks] {
		if err := sub.Ack(r); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sub.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return recs
}

// TestGroupConsumersListInfoResetRemove: a group lists as a consumer of kind "group" with
// its pattern, pending records (never handed out plus outstanding), members, last ack and
// settings, also in the metrics while no member is connected; another tenant does not see
// it; reset and rm are refused while a member is connected unless forced, a forced reset
// ends the member and clears the outstanding set, and the group then delivers from the new
// floor; rm removes its state.
func TestGroupConsumersListInfoResetRemove(t *testing.T) {
	n := tenantNode(t)
	ctx := context.Background()
	acme, globex := mustDialAs(t, n, acmeToken), mustDialAs(t, n, globexToken)
	managePublish(t, acme, "orders.eu", 10)
	before := time.Now()
	member := joinGroup(t, acme, "orders.*", client.SubscribeOptions{Group: "workers", AckWait: time.Minute, MaxDeliver: 7, DeadLetter: "orders.dlq.workers"})
	readAckGroup(t, member, 6, 4) // the node hands it all 10; 4 acknowledged

	list, err := acme.Consumers(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("acme's consumers: %+v %v", list, err)
	}
	c := list[0]
	if c.Name != "workers" || c.Kind != client.KindGroup || c.Pattern != "orders.*" || c.Pending != 6 || c.Members != 1 || c.LastAck.Before(before.Add(-time.Second)) {
		t.Fatalf("group row: %+v; want workers, group, orders.*, 6 pending, 1 member, a recent last ack", c)
	}
	if g := c.Group; g == nil || g.AckWait != time.Minute || g.MaxDeliver != 7 || g.DeadLetter != "orders.dlq.workers" || g.Outstanding != 6 {
		t.Fatalf("group settings in the listing: %+v", c.Group)
	}
	if list, err := globex.Consumers(ctx); err != nil || len(list) != 0 {
		t.Fatalf("globex sees %+v %v; want none of acme's", list, err)
	}
	info, err := acme.ConsumerInfo(ctx, "workers")
	if err != nil || len(info.Topics) != 1 || info.Topics[0].Topic != "orders.eu" || info.Topics[0].Resume != 4 ||
		info.Topics[0].Next != 10 || info.Topics[0].Pending != 6 || info.Topics[0].Outstanding != 6 {
		t.Fatalf("info: %+v %v; want orders.eu floor 4, head 10, 6 pending, 6 outstanding", info, err)
	}

	_, err = acme.ResetConsumer(ctx, "workers", client.Earliest, client.ManageOptions{})
	if codeOf(err) != client.CodeInUse || !strings.Contains(err.Error(), "--force") || !strings.Contains(err.Error(), "group") {
		t.Fatalf("reset with a member: %v; want in use, naming the group and --force", err)
	}
	if _, err := acme.DeleteConsumer(ctx, "workers", client.ManageOptions{}); codeOf(err) != client.CodeInUse {
		t.Fatalf("remove with a member: %v; want in use", err)
	}
	info, err = acme.ResetConsumer(ctx, "workers", client.AtOffset(2), client.ManageOptions{Force: true})
	if err != nil || info.Members != 0 || info.Pending != 8 || info.Topics[0].Resume != 2 || info.Group.Outstanding != 0 {
		t.Fatalf("forced reset: %+v %v; want no member, 8 pending, floor 2, nothing outstanding", info, err)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		_, err := member.Next(rctx) // records it had read ahead come first
		if err != nil {
			if codeOf(err) != client.CodeInUse {
				t.Fatalf("the member after a forced reset: %v; want its subscription ended with in use", err)
			}
			break
		}
	}
	// No member: the metrics still show the group's backlog.
	if v := metricWith(t, n, "quicmq_consumer_pending_records", map[string]string{"tenant": "acme", "name": "workers", "kind": "group"}); v != 8 {
		t.Fatalf("pending metric of the group: %v, want 8", v)
	}
	if v := metricWith(t, n, "quicmq_consumer_last_ack_age_seconds", map[string]string{"tenant": "acme", "name": "workers", "kind": "group"}); v < 0 || v > 60 {
		t.Fatalf("last ack age of the group: %v", v)
	}

	// A new member gets every record from the new floor, those outstanding before included.
	again := joinGroup(t, acme, "orders.*", client.SubscribeOptions{Group: "workers"})
	for i, r := range readAckGroup(t, again, 8, 8) {
		if r.Offset != uint64(2+i) {
			t.Fatalf("record %d after the reset has offset %d, want %d", i, r.Offset, 2+i)
		}
	}
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
	if info, err := acme.ConsumerInfo(ctx, "workers"); err != nil || info.Pending != 0 || info.Members != 0 || info.Topics[0].Resume != 10 {
		t.Fatalf("after the new member: %+v %v; want nothing pending, floor 10", info, err)
	}
	if removed, err := acme.DeleteConsumer(ctx, "workers", client.ManageOptions{}); err != nil || removed != 1 {
		t.Fatalf("remove: %d %v; want its one topic state", removed, err)
	}
	if _, err := acme.ConsumerInfo(ctx, "workers"); codeOf(err) != client.CodeNotFound {
		t.Fatalf("info after remove: %v; want not found", err)
	}
	if _, _, ok, err := n.wal.Group("tenant/acme/workers"); ok || err != nil {
		t.Fatalf("the group's state after remove: %v %v", ok, err)
	}
}

// TestGroupTopicPurgeDelete: purge and delete of a topic a group has state on are refused
// naming the group unless forced; a forced purge moves the live group's floor past the
// purge (new records are delivered, nothing of the purge), a forced delete removes the
// group's state of the topic, and the member goes on with its other topic.
func TestGroupTopicPurgeDelete(t *testing.T) {
	n := tenantNode(t)
	ctx := context.Background()
	acme := mustDialAs(t, n, acmeToken)
	managePublish(t, acme, "orders.a", 5)
	managePublish(t, acme, "orders.b", 5)
	member := joinGroup(t, acme, "orders.>", client.SubscribeOptions{Group: "workers", AckWait: time.Minute})
	readAckGroup(t, member, 10, 10)
	managePublish(t, acme, "orders.a", 3) // unread: offsets 5-7

	for _, del := range []bool{false, true} {
		remove, what := acme.PurgeTopic, "purge"
		if del {
			remove, what = acme.DeleteTopic, "delete"
		}
		_, err := remove(ctx, "orders.a", client.ManageOptions{})
		if codeOf(err) != client.CodeInUse || !strings.Contains(err.Error(), `consumer group "workers"`) {
			t.Fatalf("%s with a group on the topic: %v; want in use, naming the group", what, err)
		}
		if del {
			break
		}
		if _, err := remove(ctx, "orders.a", client.ManageOptions{Force: true}); err != nil {
			t.Fatal(err)
		}
	}
	_, states, _, err := n.wal.Group("tenant/acme/workers")
	if err != nil || states["acme.orders.a"] == nil || states["acme.orders.a"].Floor < 5 {
		t.Fatalf("group state of orders.a after the purge: %+v %v; want its floor past the purge", states["acme.orders.a"], err)
	}
	managePublish(t, acme, "orders.a", 1) // offset 8
	for {
		// Records 5-7 may have reached the member (it reads ahead) before the purge.
		r := readAckGroup(t, member, 1, 1)[0]
		if r.Topic != "orders.a" || r.Offset > 8 {
			t.Fatalf("after the purge the member got %s@%d; want orders.a@8", r.Topic, r.Offset)
		}
		if r.Offset == 8 {
			break
		}
	}
	info, err := acme.ConsumerInfo(ctx, "workers")
	if err != nil || len(info.Topics) != 2 || info.Topics[0].Resume != 9 || info.Pending != 0 {
		t.Fatalf("info after the purge: %+v %v; want floor 9 on orders.a, nothing pending", info, err)
	}

	if _, err := acme.DeleteTopic(ctx, "orders.b", client.ManageOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if _, states, _, _ := n.wal.Group("tenant/acme/workers"); states["acme.orders.b"] != nil || states["acme.orders.a"] == nil {
		t.Fatalf("group states after deleting orders.b: %+v; want orders.a's only", states)
	}
	managePublish(t, acme, "orders.a", 1)
	readAckGroup(t, member, 1, 1) // the member goes on, and its ACK is stored
	if _, states, _, _ := n.wal.Group("tenant/acme/workers"); states["acme.orders.b"] != nil || states["acme.orders.a"].Floor != 10 {
		t.Fatalf("group states after the next store: %+v; orders.b must not come back", states)
	}
	if info, err := acme.ConsumerInfo(ctx, "workers"); err != nil || len(info.Topics) != 1 {
		t.Fatalf("info after the delete: %+v %v; want orders.a only", info, err)
	}
}

// TestGroupNamesAndTenantCap: a group and a durable consumer cannot share a name, and
// MaxDurablesPerTenant counts groups.
func TestGroupNamesAndTenantCap(t *testing.T) {
	n := tenantNode(t, func(c *Config) { c.MaxDurablesPerTenant = 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	acme := mustDialAs(t, n, acmeToken)
	managePublish(t, acme, "orders.eu", 1)
	consumeAndAck(t, acme, "orders.eu", "billing", 1)
	if _, err := acme.Subscribe(ctx, "orders.eu", client.SubscribeOptions{Group: "billing"}); codeOf(err) != client.CodeConflict {
		t.Fatalf("a group named as a durable: %v; want conflict", err)
	}
	g := joinGroup(t, acme, "orders.eu", client.SubscribeOptions{Group: "workers"})
	if _, err := acme.Subscribe(ctx, "orders.eu", client.SubscribeOptions{Durable: "workers"}); codeOf(err) != client.CodeConflict {
		t.Fatalf("a durable named as a group: %v; want conflict", err)
	}
	_, err := acme.Subscribe(ctx, "orders.eu", client.SubscribeOptions{Group: "third"})
	if codeOf(err) != client.CodeLimit || !strings.Contains(err.Error(), "quicmq consumers rm") {
		t.Fatalf("a third consumer (a group) past a cap of 2: %v; want the limit", err)
	}
	if _, err := acme.Subscribe(ctx, "orders.eu", client.SubscribeOptions{Durable: "third"}); codeOf(err) != client.CodeLimit {
		t.Fatalf("a third consumer (a durable) past a cap of 2: %v; want the limit", err)
	}
	joinGroup(t, acme, "orders.eu", client.SubscribeOptions{Group: "workers"}) // an existing group is no new consumer
	g.Close()
	if _, err := acme.DeleteConsumer(ctx, "workers", client.ManageOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	joinGroup(t, acme, "orders.eu", client.SubscribeOptions{Group: "third"})
}

// TestAdminGroupConsumer: the admin API shows a group with its settings, outstanding
// records and per-topic floor, and removes it.
func TestAdminGroupConsumer(t *testing.T) {
	n := tenantNode(t, func(c *Config) { c.AdminAPI = true })
	srv := httptest.NewServer(n.AdminHandler())
	defer srv.Close()
	acme := mustDialAs(t, n, acmeToken)
	managePublish(t, acme, "orders.eu", 3)
	member := joinGroup(t, acme, "orders.eu", client.SubscribeOptions{Group: "workers", OrderBy: client.OrderByKey})
	readAckGroup(t, member, 3, 2)
	member.Close()

	var one manage.ConsumerInfo
	if code := httpJSON(t, "GET", srv.URL+"/v1/consumers/workers?tenant=acme", &one); code != 200 || one.Kind != "group" ||
		one.GroupJSON == nil || one.Order != "key" || one.MaxDeliver != 5 || one.AckWait != "30s" ||
		len(one.Topics) != 1 || one.Topics[0].Floor == nil || *one.Topics[0].Floor != 2 || one.Pending != 1 {
		t.Fatalf("GET a group: %d %+v %+v", code, one, one.GroupJSON)
	}
	var removed map[string]int
	if code := httpJSON(t, "DELETE", srv.URL+"/v1/consumers/workers?tenant=acme", &removed); code != 200 || removed["positions_removed"] != 1 {
		t.Fatalf("DELETE a group: %d %v", code, removed)
	}
	if code := httpJSON(t, "GET", srv.URL+"/v1/consumers/workers?tenant=acme", nil); code != 404 {
		t.Fatalf("GET a removed group: %d, want 404", code)
	}
}

// TestConsumerNameOfBoth: a name a durable and a group share (stored before names were kept
// apart: made here in the log directly) lists as two rows; info and reset are refused naming
// the way out, and rm removes both.
func TestConsumerNameOfBoth(t *testing.T) {
	n := tenantNode(t)
	ctx := context.Background()
	acme := mustDialAs(t, n, acmeToken)
	managePublish(t, acme, "orders.eu", 2)
	consumeAndAck(t, acme, "orders.eu", "billing", 1)
	if err := n.wal.SetGroup(ctx, "tenant/acme/billing", &wal.GroupSettings{Pattern: "acme.orders.eu", AckWait: time.Second, MaxDeliver: 1},
		map[string]*wal.GroupState{"acme.orders.eu": {Floor: 1, Next: 1}}); err != nil {
		t.Fatal(err)
	}
	list, err := acme.Consumers(ctx)
	if err != nil || len(list) != 2 || list[0].Kind != client.KindDurable || list[1].Kind != client.KindGroup {
		t.Fatalf("listing: %+v %v; want billing twice, durable then group", list, err)
	}
	if _, err := acme.ConsumerInfo(ctx, "billing"); codeOf(err) != client.CodeConflict || !strings.Contains(err.Error(), "consumers rm billing") {
		t.Fatalf("info: %v; want a conflict naming rm", err)
	}
	if _, err := acme.ResetConsumer(ctx, "billing", client.Earliest, client.ManageOptions{}); codeOf(err) != client.CodeConflict {
		t.Fatalf("reset: %v; want a conflict", err)
	}
	if removed, err := acme.DeleteConsumer(ctx, "billing", client.ManageOptions{}); err != nil || removed != 2 {
		t.Fatalf("rm: %d %v; want the durable's position and the group's topic state", removed, err)
	}
	if list, err := acme.Consumers(ctx); err != nil || len(list) != 0 {
		t.Fatalf("after rm: %+v %v", list, err)
	}
}
