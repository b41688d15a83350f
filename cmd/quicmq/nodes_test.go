package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/node"
	"github.com/quicmq/quicmq/node/manage"
	"github.com/quicmq/quicmq/node/nodetest"
)

// startReplicatedRegion starts three nodes eu-1..eu-3 of a replicated region (in this
// process, on loopback) and returns them with eu-1's admin API address.
func startReplicatedRegion(t *testing.T) ([]*node.Node, string) {
	t.Helper()
	caDir := t.TempDir()
	var nodes []*node.Node
	var lan, wan []string
	for i := 1; i <= 3; i++ {
		n, _ := nodetest.Start(t, func(c *node.Config) {
			c.Name, c.CADir, c.Replicas, c.AdminAPI = fmt.Sprintf("eu-%d", i), caDir, 3, true
			c.GossipLAN, c.GossipWAN, c.GossipProfile = "127.0.0.1:0", "127.0.0.1:0", gossip.ProfileTest
			c.Join, c.WANJoin = lan, wan
			c.Raft = node.TestRaftSettings()
			c.Raft.GroupsPerNode = 2
		})
		nodes = append(nodes, n)
		lan, wan = append(lan, n.Gossip().LANAddr()), append(wan, n.Gossip().WANAddr())
	}
	srv := httptest.NewServer(nodes[0].AdminHandler())
	t.Cleanup(srv.Close)
	return nodes, strings.TrimPrefix(srv.URL, "http://")
}

// TestNodesCLI: 'quicmq nodes' lists the region's nodes with the documented JSON fields;
// drain waits until the node leads nothing and shows it draining, undrain --no-wait
// returns at once; bad input is refused with the reason.
func TestNodesCLI(t *testing.T) {
	nodes, admin := startReplicatedRegion(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{CAFile: nodes[0].CAFile()}, nodes[0].Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 12 {
		for {
			if _, err := c.Publish(ctx, client.Message{Topic: fmt.Sprintf("cli.%d", i), Payload: []byte("x")}); err == nil {
				break
			} else if ctx.Err() != nil {
				t.Fatal(err)
			}
		}
	}
	var rows []map[string]any
	testlog.WaitForErr(t, 30*time.Second, "nodes to list 3 nodes leading 3 groups in all", func() error {
		code, out, errOut := runCLI(t, "", "nodes", "--admin", admin, "--format", "json")
		if code != 0 {
			t.Fatalf("nodes: exit %d %s", code, errOut)
		}
		rows = nil
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			t.Fatalf("nodes --format json: %v\n%s", err, out)
		}
		led := 0.0
		for _, r := range rows {
			led += r["led"].(float64)
		}
		if len(rows) == 3 && led == 3 {
			return nil
		}
		return fmt.Errorf("it lists:\n%s", out)
	})
	for i, r := range rows {
		for _, f := range []string{"name", "role", "state", "held", "led", "moves"} {
			if _, ok := r[f]; !ok {
				t.Fatalf("row %d has no field %q: %v", i, f, r)
			}
		}
		if r["name"] != fmt.Sprintf("eu-%d", i+1) || r["role"] != "voter" || r["state"] != "up" || r["held"] != 3.0 {
			t.Errorf("row %d: %v", i, r)
		}
		if m, ok := r["moves"].([]any); !ok || len(m) != 0 {
			t.Errorf("row %d: moves %v, want an empty array", i, r["moves"])
		}
	}

	code, out, errOut := runCLI(t, "", "nodes", "drain", "eu-2", "--admin", admin, "--format", "json")
	if code != 0 {
		t.Fatalf("drain: exit %d %s", code, errOut)
	}
	if !strings.Contains(errOut, "eu-2: draining, leads 0") {
		t.Errorf("drain's progress does not end with eu-2 leading nothing:\n%s", errOut)
	}
	var after []manage.NodeInfo
	if err := json.Unmarshal([]byte(out), &after); err != nil {
		t.Fatal(err)
	}
	for _, n := range after {
		if n.Name == "eu-2" && (n.State != "draining" || n.Led != 0 || n.MetaLeader) {
			t.Errorf("after drain: %+v", n)
		}
	}
	code, out, errOut = runCLI(t, "", "nodes", "undrain", "eu-2", "--admin", admin, "--no-wait")
	if code != 0 || !strings.Contains(out, "eu-2") {
		t.Fatalf("undrain --no-wait: exit %d %s %s", code, out, errOut)
	}
	code, out, _ = runCLI(t, "", "nodes", "--admin", admin)
	if code != 0 || !strings.Contains(out, "NAME") || !strings.Contains(out, "eu-1 (this node)") {
		t.Errorf("nodes table: exit %d\n%s", code, out)
	}
	t.Logf("nodes:\n%s", out)

	for _, bad := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"nodes", "drain"}, 2, "drain takes one node name"},
		{[]string{"nodes", "drain", "a", "b"}, 2, "drain takes one node name"},
		{[]string{"nodes", "evict", "eu-1"}, 2, `unknown operation "evict"`},
		{[]string{"nodes", "--no-wait"}, 2, "--no-wait applies to drain and undrain and remove only"},
		{[]string{"nodes", "drain", "eu-2", "--dead"}, 2, "--dead applies to remove only"},
		{[]string{"nodes", "remove"}, 2, "remove takes one node name"},
		{[]string{"nodes", "remove", "eu-2", "--admin", admin}, 1, `region "eu" would be left with 2 nodes, fewer than its 3 replicas`},
		{[]string{"nodes", "remove", "--dead", "eu-2", "--admin", admin}, 1, `region "eu" would be left with 2 nodes`},
		{[]string{"nodes", "--format", "xml"}, 2, `--format "xml": want table or json`},
		{[]string{"nodes", "drain", "nosuch", "--admin", admin}, 1, `node "nosuch" is not a node of region "eu"`},
	} {
		code, _, errOut := runCLI(t, "", bad.args...)
		if code != bad.code || !strings.Contains(errOut, bad.want) {
			t.Errorf("%v: exit %d %q, want exit %d saying %q", bad.args, code, errOut, bad.code, bad.want)
		}
	}
}
