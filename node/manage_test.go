package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/manage"
	"github.com/quicmq/quicmq/wal"
)

// publishN publishes count records to topic.
func managePublish(t *testing.T, c *client.Conn, topic string, count int) {
	t.Helper()
	for i := range count {
		if _, err := c.Publish(context.Background(), client.Message{Topic: topic, Payload: fmt.Appendf(nil, "r%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
}

// consumeAndAck reads count records as durable name and acknowledges each, then closes the
// subscription (which stores the last ACK before it returns).
func consumeAndAck(t *testing.T, c *client.Conn, pattern, name string, count int) {
	t.Helper()
	sub, err := c.Subscribe(context.Background(), pattern, client.SubscribeOptions{Durable: name})
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range manageRead(t, sub, count) {
		if err := sub.Ack(rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
}

func manageRead(t *testing.T, sub *client.Subscription, count int) []client.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []client.Record
	for len(out) < count {
		rec, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("after %d of %d records: %v", len(out), count, err)
		}
		out = append(out, rec)
	}
	return out
}

// TestConsumersListInfoResetRemove: a tenant lists, inspects, resets and removes its
// durable consumer; another tenant never sees it; a reset or removal is refused while a
// member is connected unless forced, and a forced one ends the member; a consumer reset to
// offset 0 resumes there (not at its start position).
func TestConsumersListInfoResetRemove(t *testing.T) {
	n := tenantNode(t)
	ctx := context.Background()
	acme, globex, ops := mustDialAs(t, n, acmeToken), mustDialAs(t, n, globexToken), mustDialAs(t, n, opsToken)
	managePublish(t, acme, "orders.eu", 5)
	before := time.Now()
	consumeAndAck(t, acme, "orders.>", "billing", 3)

	list, err := acme.Consumers(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("acme's consumers: %+v %v", list, err)
	}
	c := list[0]
	if c.Name != "billing" || c.Kind != client.KindDurable || c.Pending != 2 || c.Members != 0 || c.LastAck.Before(before.Add(-time.Second)) {
		t.Fatalf("consumer: %+v; want billing, durable, 2 pending, no member, a recent last ack", c)
	}
	if list, err := globex.Consumers(ctx); err != nil || len(list) != 0 {
		t.Fatalf("globex sees %+v %v; want none of acme's", list, err)
	}
	if _, err := globex.ConsumerInfo(ctx, "billing"); codeOf(err) != client.CodeNotFound {
		t.Fatalf("globex's info of acme's consumer: %v; want not found", err)
	}
	if _, err := globex.DeleteConsumer(ctx, "billing", client.ManageOptions{Force: true}); codeOf(err) != client.CodeNotFound {
		t.Fatalf("globex removing acme's consumer: %v; want not found", err)
	}
	if list, err := ops.Consumers(ctx); err != nil || len(list) != 1 || list[0].Name != "tenant/acme/billing" {
		t.Fatalf("the operator's listing: %+v %v; want tenant/acme/billing", list, err)
	}

	// A member connected: shown, and a reset is refused naming --force.
	member, err := acme.Subscribe(ctx, "orders.>", client.SubscribeOptions{Durable: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	manageRead(t, member, 2)
	info, err := acme.ConsumerInfo(ctx, "billing")
	if err != nil || info.Members != 1 || info.Pattern != "orders.>" || len(info.Topics) != 1 ||
		info.Topics[0].Topic != "orders.eu" || info.Topics[0].Resume != 3 || info.Topics[0].Next != 5 {
		t.Fatalf("info with a member: %+v %v", info, err)
	}
	_, err = acme.ResetConsumer(ctx, "billing", client.Earliest, client.ManageOptions{})
	if codeOf(err) != client.CodeInUse || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("reset with a member: %v; want in use, naming --force", err)
	}
	if _, err := acme.DeleteConsumer(ctx, "billing", client.ManageOptions{}); codeOf(err) != client.CodeInUse {
		t.Fatalf("remove with a member: %v; want in use", err)
	}
	info, err = acme.ResetConsumer(ctx, "billing", client.Earliest, client.ManageOptions{Force: true})
	if err != nil || info.Members != 0 || info.Pending != 5 || info.Topics[0].Resume != 0 {
		t.Fatalf("forced reset: %+v %v; want no member, 5 pending, resume 0", info, err)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := member.Next(rctx); codeOf(err) != client.CodeInUse {
		t.Fatalf("the member after a forced reset: %v; want its subscription ended with in use", err)
	}

	// Reset to 0: the consumer resumes at 0 even when it subscribes from latest.
	again, err := acme.Subscribe(ctx, "orders.>", client.SubscribeOptions{Durable: "billing", From: client.Latest})
	if err != nil {
		t.Fatal(err)
	}
	if recs := manageRead(t, again, 1); recs[0].Offset != 0 {
		t.Fatalf("after a reset to earliest the consumer resumed at %d, want 0", recs[0].Offset)
	}
	again.Close()

	if info, err := acme.ResetConsumer(ctx, "billing", client.AtOffset(4), client.ManageOptions{}); err != nil || info.Pending != 1 {
		t.Fatalf("reset to offset 4: %+v %v; want 1 pending", info, err)
	}
	if _, err := acme.ResetConsumer(ctx, "billing", client.AtOffset(99), client.ManageOptions{}); codeOf(err) != client.CodeInvalidArgument || !strings.Contains(err.Error(), "next offset 5") {
		t.Fatalf("reset past the head: %v; want invalid argument naming the next offset", err)
	}
	if info, err := acme.ResetConsumer(ctx, "billing", client.Latest, client.ManageOptions{}); err != nil || info.Pending != 0 {
		t.Fatalf("reset to latest: %+v %v; want nothing pending", info, err)
	}
	if removed, err := acme.DeleteConsumer(ctx, "billing", client.ManageOptions{}); err != nil || removed != 1 {
		t.Fatalf("remove: %d %v; want 1 position removed", removed, err)
	}
	if list, err := acme.Consumers(ctx); err != nil || len(list) != 0 {
		t.Fatalf("after removal: %+v %v", list, err)
	}
	if _, err := acme.ConsumerInfo(ctx, "billing"); codeOf(err) != client.CodeNotFound {
		t.Fatalf("info after removal: %v; want not found", err)
	}
	if _, err := acme.ConsumerInfo(ctx, "bad/name"); codeOf(err) != client.CodeInvalidArgument {
		t.Fatalf("a name outside the grammar: %v; want invalid argument", err)
	}
}

// TestMaxDurablesPerTenantNamesTheWayOut: past the cap a new durable is refused with a
// message saying how to remove one; after removing one, it is taken.
func TestMaxDurablesPerTenantNamesTheWayOut(t *testing.T) {
	n := tenantNode(t, func(c *Config) { c.MaxDurablesPerTenant = 1 })
	ctx := context.Background()
	acme := mustDialAs(t, n, acmeToken)
	managePublish(t, acme, "orders.eu", 1)
	consumeAndAck(t, acme, "orders.eu", "first", 1)
	_, err := acme.Subscribe(ctx, "orders.eu", client.SubscribeOptions{Durable: "second"})
	if codeOf(err) != client.CodeLimit || !strings.Contains(err.Error(), "quicmq consumers rm") {
		t.Fatalf("the second durable: %v; want the limit, naming quicmq consumers rm", err)
	}
	if _, err := acme.DeleteConsumer(ctx, "first", client.ManageOptions{}); err != nil {
		t.Fatal(err)
	}
	consumeAndAck(t, acme, "orders.eu", "second", 1)
}

// TestTopicsCreatePurgeDelete: per-topic retention is stored and listed; purge and delete
// are refused while a durable depends on the topic unless forced, naming it; a delete ends a
// subscription on the topic with CodeTopicDeleted and drops the topic's publish series;
// clients without the publish grant cannot do any of it.
func TestTopicsCreatePurgeDelete(t *testing.T) {
	n := tenantNode(t)
	ctx := context.Background()
	acme, reader := mustDialAs(t, n, acmeToken), mustDialAs(t, n, readerToken)
	ret := &client.TopicRetention{MaxAge: time.Hour, MaxBytes: 1 << 20}
	ti, err := acme.CreateTopic(ctx, "orders.new", client.TopicOptions{Retention: ret})
	if err != nil || ti.Name != "orders.new" || ti.Next != 0 || ti.Retention == nil || *ti.Retention != *ret {
		t.Fatalf("create: %+v %v", ti, err)
	}
	if _, err := acme.CreateTopic(ctx, "orders.new", client.TopicOptions{Retention: ret}); err != nil {
		t.Fatalf("the same configuration again: %v", err)
	}
	other := &client.TopicRetention{MaxAge: time.Minute}
	if _, err := acme.CreateTopic(ctx, "orders.new", client.TopicOptions{Retention: other}); codeOf(err) != client.CodeInvalidArgument || !strings.Contains(err.Error(), "--update") {
		t.Fatalf("another configuration: %v; want invalid argument naming --update", err)
	}
	if ti, err := acme.CreateTopic(ctx, "orders.new", client.TopicOptions{Retention: other, Update: true}); err != nil || *ti.Retention != *other {
		t.Fatalf("update: %+v %v", ti, err)
	}
	list, err := acme.Topics(ctx, "orders.new")
	if err != nil || len(list) != 1 || list[0].Retention == nil || list[0].Retention.MaxAge != time.Minute {
		t.Fatalf("listing: %+v %v; want the topic's own retention", list, err)
	}
	if _, err := reader.CreateTopic(ctx, "orders.x", client.TopicOptions{}); codeOf(err) != client.CodeForbidden {
		t.Fatalf("create without a publish grant: %v; want forbidden", err)
	}
	if _, err := reader.DeleteTopic(ctx, "orders.new", client.ManageOptions{Force: true}); codeOf(err) != client.CodeForbidden {
		t.Fatalf("delete without a publish grant: %v; want forbidden", err)
	}

	managePublish(t, acme, "orders.new", 3)
	consumeAndAck(t, acme, "orders.new", "audit", 1)
	_, err = acme.PurgeTopic(ctx, "orders.new", client.ManageOptions{})
	if codeOf(err) != client.CodeInUse || !strings.Contains(err.Error(), `durable consumer "audit"`) {
		t.Fatalf("purge with a dependent: %v; want in use naming audit", err)
	}
	if got, err := acme.PurgeTopic(ctx, "orders.new", client.ManageOptions{Force: true}); err != nil || got != 3 {
		t.Fatalf("forced purge: %d %v; want 3 records", got, err)
	}
	if list, _ := acme.Topics(ctx, "orders.new"); len(list) != 1 || list[0].First != 3 || list[0].Next != 3 {
		t.Fatalf("after the purge: %+v; want the topic kept at offset 3", list)
	}
	managePublish(t, acme, "orders.new", 1)
	if metricValueTopic(t, n, "quicmq_topic_published_records_total", "acme.orders.new") <= 0 {
		t.Fatal("no publish series for the topic")
	}

	sub, err := acme.Subscribe(ctx, "orders.new", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	manageRead(t, sub, 1)
	if _, err := acme.DeleteTopic(ctx, "orders.new", client.ManageOptions{}); codeOf(err) != client.CodeInUse {
		t.Fatalf("delete with a dependent: %v; want in use", err)
	}
	if got, err := acme.DeleteTopic(ctx, "orders.new", client.ManageOptions{Force: true}); err != nil || got != 1 {
		t.Fatalf("forced delete: %d %v; want 1 record", got, err)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := sub.Next(rctx); codeOf(err) != client.CodeTopicDeleted {
		t.Fatalf("a subscription on the deleted topic: %v; want topic deleted", err)
	}
	if v := metricValueTopic(t, n, "quicmq_topic_published_records_total", "acme.orders.new"); v != -1 {
		t.Fatalf("the deleted topic's publish series is still there (%v)", v)
	}
	if list, _ := acme.Consumers(ctx); len(list) != 0 {
		t.Fatalf("the delete left consumers: %+v", list)
	}
	if _, err := acme.DeleteTopic(ctx, "orders.new", client.ManageOptions{}); codeOf(err) != client.CodeNotFound {
		t.Fatalf("deleting it again: %v; want not found", err)
	}
	// Created again under its name, it is a new topic a new subscription sees from 0.
	managePublish(t, acme, "orders.new", 1)
	sub2, err := acme.Subscribe(ctx, "orders.>", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if recs := manageRead(t, sub2, 1); recs[0].Topic != "orders.new" || recs[0].Offset != 0 {
		t.Fatalf("the recreated topic: %+v", recs[0])
	}
}

func metricValueTopic(t *testing.T, n *Node, name, topic string) float64 {
	t.Helper()
	return metricWith(t, n, name, map[string]string{"topic": topic})
}

// metricWith returns the value of the series of name with these labels, or -1.
func metricWith(t *testing.T, n *Node, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := n.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for k, v := range labels {
				if labelValue(m, k) != v {
					continue next
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

// TestConsumerMetricsWithoutMembers: the backlog and last-ack age of a durable consumer are
// scraped while no member is connected; past MaxSeriesPerMetric consumers fold into _other.
func TestConsumerMetricsWithoutMembers(t *testing.T) {
	n := tenantNode(t, func(c *Config) { c.MaxSeriesPerMetric = 2 })
	acme := mustDialAs(t, n, acmeToken)
	managePublish(t, acme, "orders.eu", 4)
	consumeAndAck(t, acme, "orders.eu", "a", 1)
	consumeAndAck(t, acme, "orders.eu", "b", 2)
	consumeAndAck(t, acme, "orders.eu", "c", 4)
	if v := metricWith(t, n, "quicmq_consumer_pending_records", map[string]string{"tenant": "acme", "name": "a"}); v != 3 {
		t.Fatalf("pending of a: %v, want 3", v)
	}
	if v := metricWith(t, n, "quicmq_consumer_pending_records", map[string]string{"tenant": "acme", "name": "b"}); v != 2 {
		t.Fatalf("pending of b: %v, want 2", v)
	}
	if v := metricWith(t, n, "quicmq_consumer_last_ack_age_seconds", map[string]string{"tenant": "acme", "name": "a"}); v < 0 || v > 60 {
		t.Fatalf("last ack age of a: %v", v)
	}
	if v := metricWith(t, n, "quicmq_consumer_pending_records", map[string]string{"tenant": "acme", "name": "c"}); v != -1 {
		t.Fatalf("c past the cap has a series of its own (%v)", v)
	}
	if v := metricWith(t, n, "quicmq_consumer_pending_records", map[string]string{"tenant": "_other", "name": "_other"}); v != 0 {
		t.Fatalf("_other pending: %v, want 0 (c acknowledged everything)", v)
	}
	if v := metricWith(t, n, "quicmq_consumer_series_overflow", nil); v != 1 {
		t.Fatalf("overflow: %v, want 1", v)
	}
}

// TestAdminConsumersAndTopics: the admin API lists every tenant's consumers, scopes to one
// with ?tenant=, and serves the state-changing endpoints only with AdminAPI.
func TestAdminConsumersAndTopics(t *testing.T) {
	for _, enabled := range []bool{false, true} {
		t.Run(fmt.Sprintf("admin_api=%v", enabled), func(t *testing.T) {
			n := tenantNode(t, func(c *Config) { c.AdminAPI = enabled })
			srv := httptest.NewServer(n.AdminHandler())
			defer srv.Close()
			acme := mustDialAs(t, n, acmeToken)
			managePublish(t, acme, "orders.eu", 2)
			consumeAndAck(t, acme, "orders.eu", "billing", 1)

			var list []manage.ConsumerInfo
			if code := httpJSON(t, "GET", srv.URL+"/v1/consumers", &list); code != 200 || len(list) != 1 ||
				list[0].Tenant != "acme" || list[0].Name != "billing" || list[0].Pending != 1 || list[0].LastAck == nil {
				t.Fatalf("GET /v1/consumers: %d %+v", code, list)
			}
			var one manage.ConsumerInfo
			if code := httpJSON(t, "GET", srv.URL+"/v1/consumers/billing?tenant=acme", &one); code != 200 || len(one.Topics) != 1 || one.Topics[0].Topic != "orders.eu" {
				t.Fatalf("GET one: %d %+v", code, one)
			}
			if code := httpJSON(t, "GET", srv.URL+"/v1/consumers/billing?tenant=globex", nil); code != 404 {
				t.Fatalf("another tenant's consumer: %d, want 404", code)
			}
			code := httpJSON(t, "POST", srv.URL+"/v1/consumers/billing/reset?tenant=acme&to=earliest", &one)
			if !enabled {
				if code != 403 {
					t.Fatalf("reset without --admin-api: %d, want 403", code)
				}
				return
			}
			if code != 200 || one.Pending != 2 {
				t.Fatalf("reset: %d %+v", code, one)
			}
			if code := httpJSON(t, "POST", srv.URL+"/v1/consumers/billing/reset?tenant=acme&to=yesterday", nil); code != 400 {
				t.Fatalf("a bad target: %d, want 400", code)
			}
			if code := httpJSON(t, "DELETE", srv.URL+"/v1/topics/acme.orders.eu", nil); code != 409 {
				t.Fatalf("delete a topic with a consumer: %d, want 409", code)
			}
			if code := httpJSON(t, "POST", srv.URL+"/v1/topics/ops.audit?retention_age=24h", nil); code != 200 {
				t.Fatalf("create: %d", code)
			}
			if code := httpJSON(t, "DELETE", srv.URL+"/v1/consumers/billing?tenant=acme", nil); code != 200 {
				t.Fatalf("remove: %d", code)
			}
			var gone map[string]uint64
			if code := httpJSON(t, "DELETE", srv.URL+"/v1/topics/acme.orders.eu", &gone); code != 200 || gone["records_deleted"] != 2 {
				t.Fatalf("delete: %d %v", code, gone)
			}
		})
	}
}

func httpJSON(t *testing.T, method, url string, into any) int {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if into != nil && resp.StatusCode == 200 {
		if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode
}

// TestRemoveTopicNamesMirrorCursors: a mirror cursor on a topic is a dependent a purge
// names, and never shows as a consumer.
func TestRemoveTopicNamesMirrorCursors(t *testing.T) {
	n := newTestNode(t)
	ctx := context.Background()
	c := dialNode(t, n, client.Options{})
	managePublish(t, c, "orders", 2)
	if err := n.Log().SetPosition(ctx, wal.Position{Name: "mirror/us", Topic: "orders", Value: 0}); err != nil {
		t.Fatal(err)
	}
	_, err := c.PurgeTopic(ctx, "orders", client.ManageOptions{})
	if codeOf(err) != client.CodeInUse || !strings.Contains(err.Error(), `the mirror cursor of region "us"`) {
		t.Fatalf("purge with a mirror cursor: %v; want in use naming region us", err)
	}
	if list, err := c.Consumers(ctx); err != nil || len(list) != 0 {
		t.Fatalf("consumers: %+v %v; a mirror cursor is not one", list, err)
	}
	if _, err := c.ConsumerInfo(ctx, "mirror/us"); codeOf(err) != client.CodeInvalidArgument {
		t.Fatalf("a mirror cursor by name: %v; want invalid argument", err)
	}
}

// TestManageRequestsChecked: management frames with values outside the protocol get
// ERROR 13, and a stream may start with each of them.
func TestManageRequestsChecked(t *testing.T) {
	n := newTestNode(t)
	rc := mustDial(t, n)
	if e := rc.open(&wire.TopicRemove{Topic: "a", Op: 9}).expectError(); e.Code != wire.CodeInvalidArgument || !strings.Contains(e.Message, "operation 9") {
		t.Fatalf("TOPIC_REMOVE op 9: %v", e)
	}
	managePublish(t, dialNode(t, n, client.Options{}), "a", 1)
	if err := n.Log().SetPosition(context.Background(), wal.Position{Name: "d", Topic: "a", Value: 0}); err != nil {
		t.Fatal(err)
	}
	if e := rc.open(&wire.ConsumerReset{Name: "d", Start: 7}).expectError(); e.Code != wire.CodeInvalidArgument || !strings.Contains(e.Message, "start kind 7") {
		t.Fatalf("CONSUMER_RESET start 7: %v", e)
	}
	if e := rc.open(&wire.TopicCreate{Topic: "a..b"}).expectError(); e.Code != wire.CodeInvalidTopic {
		t.Fatalf("TOPIC_CREATE a..b: %v", e)
	}
	s := rc.open(&wire.Consumers{Name: "d"})
	s.str.Close()
	if ci, ok := s.next().(*wire.ConsumerInfo); !ok || ci.Name != "d" || ci.Pending != 0 || len(ci.Topics) != 1 {
		t.Fatalf("CONSUMERS d: %#v", ci)
	}
	if _, err := s.read(10 * time.Second); err != io.EOF {
		t.Fatalf("after CONSUMER_INFO: %v; want FIN", err)
	}
}
