package main

import (
	"bytes"
	"encoding/base64"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/node"
	"github.com/quicmq/quicmq/node/manage"
	"github.com/quicmq/quicmq/node/nodetest"
)

// TestGossipKeyRotationCLI rotates the gossip key of a two-node region through one node's
// admin API with the CLI: install, use, remove; list shows fingerprints, never keys, and at
// the end only the new key, primary on both members.
func TestGossipKeyRotationCLI(t *testing.T) {
	oldKey := bytes.Repeat([]byte{1}, 32)
	newKey := bytes.Repeat([]byte{2}, 32)
	caDir := t.TempDir()
	n1, _ := nodetest.Start(t, func(c *node.Config) {
		c.CADir, c.GossipLAN, c.GossipProfile, c.GossipKey = caDir, "127.0.0.1:0", gossip.ProfileTest, oldKey
		c.AdminAPI = true // key changes are state-changing admin calls
	})
	nodetest.Start(t, func(c *node.Config) {
		c.Name, c.CADir, c.GossipLAN, c.GossipProfile, c.GossipKey = "n2", caDir, "127.0.0.1:0", gossip.ProfileTest, oldKey
		c.Join = []string{n1.Gossip().LANAddr()}
	})
	testlog.WaitFor(t, 10*time.Second, "the two nodes to meet", func() bool { return len(n1.Gossip().RegionMembers("eu")) >= 2 })
	srv := httptest.NewServer(n1.AdminHandler())
	defer srv.Close()
	admin := strings.TrimPrefix(srv.URL, "http://")
	b64 := base64.StdEncoding.EncodeToString
	for _, step := range [][]string{
		{"install", b64(newKey)}, {"use", b64(newKey)}, {"remove", b64(oldKey)},
	} {
		code, out, errOut := runCLI(t, "", "gossip-keys", step[0], "--admin", admin, "--key", step[1])
		if code != 0 {
			t.Fatalf("gossip-keys %s: exit %d\n%s%s", step[0], code, out, errOut)
		}
	}
	code, out, errOut := runCLI(t, "", "gossip-keys", "list", "--admin", admin)
	if code != 0 {
		t.Fatalf("list: exit %d: %s", code, errOut)
	}
	if want := manage.KeyFingerprint(newKey) + "*:2"; !strings.Contains(out, want) || strings.Contains(out, manage.KeyFingerprint(oldKey)) {
		t.Fatalf("list after the rotation, want only %s:\n%s", want, out)
	}
	if strings.Contains(out, b64(newKey)) {
		t.Fatalf("list shows a key itself:\n%s", out)
	}
	if code, _, errOut := runCLI(t, "", "gossip-keys", "use", "--admin", admin, "--key", "short"); code == 0 || !strings.Contains(errOut, "32-byte") {
		t.Fatalf("a bad key: exit %d %s", code, errOut)
	}
	t.Logf("after rotation:\n%s", out)
}
