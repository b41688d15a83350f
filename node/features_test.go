package node

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/features"
)

func TestParseFeatures(t *testing.T) {
	f := features.Parse("proto=2, kind=9,ext,bad=x,neg=-1,=3,later=7,kind=4")
	want := features.Set{"proto": 2, "kind": 9, "ext": 1, "later": 7}
	if f.String() != want.String() {
		t.Errorf("parsed %v, want %v", f, want)
	}
	if got := features.Parse(localFeatures().String()); got.String() != localFeatures().String() {
		t.Errorf("round trip: %v, want %v", got, localFeatures())
	}
	if localFeatures()[features.Proto] != wire.PeerVersion {
		t.Errorf("this build announces proto=%d, speaks %d on peer links", localFeatures()[features.Proto], wire.PeerVersion)
	}
	// A node without the tag runs a release from before it: taken to know v0.1.0's features.
	if got := features.Of(gossip.Member{Name: "old", Tags: map[string]string{}}); got.String() != "entry=1,grouplayout=2,kind=9,meta=2,poslayout=2,proto=1" {
		t.Errorf("untagged member: %v", got)
	}
	// This build knows at least what every older one did.
	for name, level := range features.Untagged {
		if localFeatures()[name] < level {
			t.Errorf("this build announces %s=%d, below v0.1.0's %d", name, localFeatures()[name], level)
		}
	}
}

func TestAllKnowCounts(t *testing.T) {
	m := func(name, region string, st gossip.Status, feat string) gossip.Member {
		tags := map[string]string{}
		if feat != "-" {
			tags[features.Tag] = feat
		}
		return gossip.Member{Name: name, Region: region, Status: st, Tags: tags}
	}
	members := []gossip.Member{
		m("a1", "a", gossip.StatusAlive, "proto=2,x=3"),
		m("a2", "a", gossip.StatusFailed, "proto=2,x=2"), // failed: comes back with its build
		m("a3", "a", gossip.StatusLeft, "proto=1"),       // left: not counted
		m("b1", "b", gossip.StatusAlive, "-"),            // untagged: v0.1.0
	}
	for _, c := range []struct {
		region, name string
		level        int
		ok           bool
		lacking      string
	}{
		{"a", "proto", 2, true, ""},
		{"a", "x", 2, true, ""},
		{"a", "x", 3, false, "a2 (x=2)"},
		{"a", "y", 1, false, "a1 (y=0) a2 (y=0)"},
		{"b", "proto", 1, true, ""},
		{"b", "proto", 2, false, "b1 (proto=1)"},
		{"c", "proto", 1, false, "no node of region c known"},
	} {
		ok, lacking := features.AllKnow(members, c.region, "none", localFeatures(), c.name, c.level)
		if ok != c.ok || strings.Join(lacking, " ") != c.lacking {
			t.Errorf("%s knows %s=%d: %v %q, want %v %q", c.region, c.name, c.level, ok, lacking, c.ok, c.lacking)
		}
	}
	// The node itself counts with what it knows, not with what gossip last heard.
	if ok, _ := features.AllKnow(members, "b", "b1", localFeatures(), "proto", 2); !ok {
		t.Error("b1 itself announces this build's features")
	}
}

// TestFeatureGateFollowsAnnouncements: regions a and b of two nodes each. Every node
// announces this build's features; a feature is taken as known by a region (and a link) only
// while every node of it announces it, and is known again once the one that lacked it
// announces it: a2 and then b2 announce what a build of release v0.1.0 knows (client protocol
// 1 only) and later this build's features again, as an upgrade from v0.1.0 would.
func TestFeatureGateFollowsAnnouncements(t *testing.T) {
	m := newRegionMesh(t, []string{"a", "b"}, 2)
	a1, a2, b2 := m.nodes["a-1"], m.nodes["a-2"], m.nodes["b-2"]
	// waitGate waits until gate answers ok, as gossip carries the announcements; it returns
	// the nodes the gate names.
	waitGate := func(what string, gate func() (bool, []string), ok bool) []string {
		t.Helper()
		var lacking []string
		testlog.WaitForErr(t, 10*time.Second, what, func() error {
			var got bool
			if got, lacking = gate(); got == ok {
				return nil
			}
			return fmt.Errorf("still %v (lacking %v)", got, lacking)
		})
		return lacking
	}
	region := func(n *Node, name string, level int) func() (bool, []string) {
		return func() (bool, []string) { return n.RegionKnows(name, level) }
	}
	link := func(n *Node, peer, name string, level int) func() (bool, []string) {
		return func() (bool, []string) { return n.LinkKnows(peer, name, level) }
	}
	waitGate("a knows proto 2", region(a1, features.Proto, 2), true)
	waitGate("the link a-b knows proto 2", link(a1, "b", features.Proto, 2), true)
	if ok, lacking := a1.RegionKnows(features.Proto, wire.PeerVersion+1); ok || len(lacking) != 2 {
		t.Errorf("a knows a protocol newer than this build's: %v %v", ok, lacking)
	}

	// a2 runs v0.1.0's build: region a does not know protocol 2 any more, b still does.
	if err := a2.setMeshTag(features.Tag, features.Untagged.String()); err != nil {
		t.Fatal(err)
	}
	if lacking := waitGate("a lacks proto 2", region(a1, features.Proto, 2), false); !slices.Equal(lacking, []string{"a-2 (proto=1)"}) {
		t.Errorf("a lacks proto 2 at %v, want a-2", lacking)
	}
	waitGate("a still knows kind 9", region(a1, features.Kind, 9), true)
	if ok, lacking := b2.RegionKnows(features.Proto, 2); !ok {
		t.Errorf("b lacks proto 2 at %v", lacking)
	}
	// b2 hears of a-2's announcement over the WAN pool, after a-1 did.
	waitGate("the link b-a lacks proto 2 while a-2 does", link(b2, "a", features.Proto, 2), false)

	// a2 upgraded; b2 runs the old build: the link lacks it, region a knows it again.
	if err := a2.setMeshTag(features.Tag, localFeatures().String()); err != nil {
		t.Fatal(err)
	}
	if err := b2.setMeshTag(features.Tag, features.Untagged.String()); err != nil {
		t.Fatal(err)
	}
	waitGate("a knows proto 2 again", region(a1, features.Proto, 2), true)
	if lacking := waitGate("the link a-b lacks proto 2", link(a1, "b", features.Proto, 2), false); !slices.Equal(lacking, []string{"b-2 (proto=1)"}) {
		t.Errorf("the link lacks proto 2 at %v, want b-2", lacking)
	}
	if err := b2.setMeshTag(features.Tag, localFeatures().String()); err != nil {
		t.Fatal(err)
	}
	waitGate("the link a-b knows proto 2 again", link(a1, "b", features.Proto, 2), true)
}
