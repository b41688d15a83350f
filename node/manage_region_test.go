package node

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/routing"
)

// TestManageInRegion: in a region of two nodes, a client of eu-1 creates, inspects and
// deletes a topic eu-2 owns and a durable consumer whose positions eu-2 stores: the requests
// go to the owner, and the consumer listing merges the region's nodes.
func TestManageInRegion(t *testing.T) {
	m := newRegionMesh(t, []string{"eu"}, 2)
	ctx := context.Background()
	topic := ""
	for i := 0; topic == ""; i++ {
		if t := fmt.Sprintf("orders.%d", i); routing.Owner(t, []string{"eu-1", "eu-2"}) == "eu-2" {
			topic = t
		}
	}
	c := m.dial("eu-1")
	ret := &client.TopicRetention{MaxBytes: 1 << 20}
	if ti, err := c.CreateTopic(ctx, topic, client.TopicOptions{Retention: ret}); err != nil || ti.Retention == nil || *ti.Retention != *ret {
		t.Fatalf("create through eu-1: %+v %v", ti, err)
	}
	if cfg, ok := m.nodes["eu-2"].Log().TopicConfig(topic); !ok || !cfg.RetentionSet || cfg.Retention.MaxBytes != 1<<20 {
		t.Fatalf("the owner eu-2 has %+v %v; want the topic with its retention", cfg, ok)
	}
	if _, _, ok := m.nodes["eu-1"].Log().Bounds(topic); ok {
		t.Fatal("eu-1 created the topic in its own log; the owner is eu-2")
	}
	managePublish(t, c, topic, 3)
	consumeAndAck(t, c, topic, "audit", 1)
	m.waitPosition("eu-2", "audit", topic, 0)

	list, err := c.Consumers(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "audit" || list[0].Pending != 2 {
		t.Fatalf("consumers through eu-1: %+v %v; want audit with 2 pending (stored on eu-2)", list, err)
	}
	info, err := c.ResetConsumer(ctx, "audit", client.Earliest, client.ManageOptions{})
	if err != nil || info.Pending != 3 || len(info.Topics) != 1 || info.Topics[0].Resume != 0 {
		t.Fatalf("reset through eu-1: %+v %v", info, err)
	}
	if r, ok, _ := m.nodes["eu-2"].Log().Resume("audit", topic); !ok || r != 0 {
		t.Fatalf("eu-2 resumes audit at %d %v, want 0", r, ok)
	}
	if _, err := c.DeleteTopic(ctx, topic, client.ManageOptions{}); codeOf(err) != client.CodeInUse || !strings.Contains(err.Error(), "audit") {
		t.Fatalf("delete with a dependent: %v; want in use naming audit", err)
	}
	if n, err := c.DeleteConsumer(ctx, "audit", client.ManageOptions{}); err != nil || n != 1 {
		t.Fatalf("remove through eu-1: %d %v", n, err)
	}
	if got, err := c.DeleteTopic(ctx, topic, client.ManageOptions{}); err != nil || got != 3 {
		t.Fatalf("delete through eu-1: %d %v; want 3 records", got, err)
	}
	if list, err := c.Topics(ctx, topic); err != nil || len(list) != 0 {
		t.Fatalf("the deleted topic is still listed: %+v %v", list, err)
	}
}
