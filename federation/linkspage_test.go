package federation

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/testlog"
)

// LinksPage lists a link's mirrored topics by pages in name order (MirrorsNext to go on), its
// count always whole, and only the link asked for.
func TestLinksPageListsMirrorsByPages(t *testing.T) {
	m := newFedMesh(t)
	a := m.addNode("a", nodeOpts{})
	b := m.addNode("b", nodeOpts{})
	var want []string
	for i := range 25 {
		name := fmt.Sprintf("pg.t%02d", i)
		b.publishSeq(t, name, 0, 1)
		want = append(want, name)
	}
	a.fedNow().AddInterest("pg.>")
	testlog.WaitFor(t, 10*time.Second, "25 topics mirrored", func() bool { li, ok := a.link("b"); return ok && li.MirroredTopics == 25 })
	var got []string
	after, pages := "", 0
	for {
		links := a.fedNow().LinksPage(LinksOptions{MirrorsAfter: after, MaxMirrors: 10})
		if len(links) != 1 || links[0].MirroredTopics != 25 || len(links[0].Mirrors) > 10 {
			t.Fatalf("page after %q: %+v", after, links)
		}
		pages++
		got = append(got, links[0].Mirrors...)
		if after = links[0].MirrorsNext; after == "" {
			break
		}
		if after != got[len(got)-1] {
			t.Fatalf("mirrors_next %q, want the page's last topic %q", after, got[len(got)-1])
		}
	}
	if !slices.Equal(got, want) || pages != 3 {
		t.Fatalf("%d pages: %v, want %v", pages, got, want)
	}
	if links := a.fedNow().LinksPage(LinksOptions{}); len(links) != 1 || links[0].Mirrors != nil || links[0].MirroredTopics != 25 {
		t.Fatalf("no topics asked for: %+v", links)
	}
	if links := a.fedNow().LinksPage(LinksOptions{Node: "nobody", MaxMirrors: 10}); len(links) != 0 {
		t.Fatalf("the link to another node: %+v", links)
	}
	li, _ := a.link("b")
	if links := a.fedNow().LinksPage(LinksOptions{Node: li.Node, MaxMirrors: 100}); len(links) != 1 || !slices.Equal(links[0].Mirrors, want) || links[0].MirrorsNext != "" {
		t.Fatalf("the link to %s, every topic in one page: %+v", li.Node, links)
	}
}
