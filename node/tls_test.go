package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/federation"
	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/certs"
	"github.com/quicmq/quicmq/internal/testlog"
)

// TestNodesRunOnIssuedCertificates: nodes started from `quicmq certs node` files hold no CA
// key. Two such nodes of one region, whose certificates come from two different CAs (a CA
// rotation half-way), link up because each trusts a bundle of both; a client trusts the
// bundle too.
func TestNodesRunOnIssuedCertificates(t *testing.T) {
	root := t.TempDir()
	oldCA, _, err := certs.EnsureCA(filepath.Join(root, "ca-old"))
	if err != nil {
		t.Fatal(err)
	}
	newCA, _, err := certs.EnsureCA(filepath.Join(root, "ca-new"))
	if err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(root, "bundle.pem")
	var pems []byte
	for _, d := range []string{"ca-old", "ca-new"} {
		b, err := os.ReadFile(filepath.Join(root, d, "ca.pem"))
		if err != nil {
			t.Fatal(err)
		}
		pems = append(pems, b...)
	}
	if err := os.WriteFile(bundle, pems, 0o644); err != nil {
		t.Fatal(err)
	}
	issue := func(ca *certs.CA, name string) (string, string) {
		files, err := ca.IssueFiles(filepath.Join(root, name), certs.KindNode, name, []string{name, "127.0.0.1"}) // as quicmq certs node does
		if err != nil {
			t.Fatal(err)
		}
		return files[0], files[1]
	}
	c1, k1 := issue(oldCA, "eu-1")
	c2, k2 := issue(newCA, "eu-2")
	var lan string
	start := func(name, cert, key string) *Node {
		caDir := t.TempDir() // empty: the node must not need (or create) a CA
		n := newTestNode(t, func(c *Config) {
			c.Name, c.Region, c.CADir = name, "eu", caDir
			c.CertFile, c.KeyFile, c.CABundle = cert, key, bundle
			c.GossipLAN, c.GossipProfile = "127.0.0.1:0", gossip.ProfileTest
			if lan != "" {
				c.Join = []string{lan}
			}
		})
		if entries, _ := os.ReadDir(caDir); len(entries) != 0 {
			t.Fatalf("%s wrote into its CA directory: %v", name, entries)
		}
		return n
	}
	n1 := start("eu-1", c1, k1)
	lan = n1.Gossip().LANAddr()
	n2 := start("eu-2", c2, k2)
	m := &regionMesh{t: t, nodes: map[string]*Node{"eu-1": n1, "eu-2": n2}, names: []string{"eu-1", "eu-2"}}
	m.waitReady() // links both ways: each verified the other's certificate against the bundle
	if n1.CAFile() != bundle || n2.CAFile() != bundle {
		t.Fatalf("clients must be told to trust the bundle: %q %q", n1.CAFile(), n2.CAFile())
	}
	m.dial("eu-2") // a client trusting the bundle reaches the node on the new CA

	// A node certificate from neither CA is refused by the others' links.
	rogueCA, _, err := certs.EnsureCA(filepath.Join(root, "ca-rogue"))
	if err != nil {
		t.Fatal(err)
	}
	cr, kr := issue(rogueCA, "eu-3")
	rogue := newTestNode(t, func(c *Config) {
		c.Name, c.Region, c.CADir = "eu-3", "eu", t.TempDir()
		c.CertFile, c.KeyFile, c.CABundle = cr, kr, bundle
		c.GossipLAN, c.GossipProfile, c.Join = "127.0.0.1:0", gossip.ProfileTest, []string{lan}
	})
	_ = rogue
	for _, l := range waitLinkTried(t, n1, "eu-3") {
		if l.Connected {
			t.Fatal("a link to a node with a certificate of an untrusted CA came up")
		}
		if !strings.Contains(l.LastError, "certificate") {
			t.Fatalf("link to the rogue node failed for another reason: %q", l.LastError)
		}
	}
}

// waitLinkTried waits until n's link to node name has tried to connect (connected, or
// failed with an error) and returns it.
func waitLinkTried(t *testing.T, n *Node, name string) []federation.LinkInfo {
	t.Helper()
	var tried []federation.LinkInfo
	testlog.WaitFor(t, 15*time.Second, "the link to "+name+" to try", func() bool {
		for _, l := range n.Federation().Links() {
			if l.Node == name && (l.Connected || l.LastError != "") {
				tried = []federation.LinkInfo{l}
				return true
			}
		}
		return false
	})
	return tried
}
