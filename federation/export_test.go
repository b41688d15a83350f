package federation

import (
	"fmt"

	"github.com/quic-go/quic-go"
)

// appCutByTest is the application error code a test closes a link's connection with.
const appCutByTest quic.ApplicationErrorCode = 0x7e57

// cutLinks closes, from this side, the QUIC connection of every link to a node of region,
// as a lost path noticed by the idle timer would, without stopping the links: each one
// reconnects and resumes its mirrors from their cursors. It returns how many connections
// it closed.
func (f *Federation) cutLinks(region string) int {
	n := 0
	for _, l := range f.links() {
		if l.peer.Region != region {
			continue
		}
		l.mu.Lock()
		conn := l.mu.conn
		l.mu.Unlock()
		if conn != nil {
			conn.CloseWithError(appCutByTest, "cut by test")
			n++
		}
	}
	return n
}

// mirrorCursors returns the in-memory cursor (last mirrored origin offset, -1 for none) of
// every running mirror on the links to region, by topic.
func (f *Federation) mirrorCursors(region string) map[string]int64 {
	out := make(map[string]int64)
	for _, l := range f.links() {
		if l.peer.Region != region {
			continue
		}
		l.mu.Lock()
		for t, m := range l.mu.mirrors {
			out[t] = m.cursor.Load()
		}
		l.mu.Unlock()
	}
	return out
}

// sharedLink is the shared-link mapping's state on the link's current connection, nil when
// the link uses another mapping or is not connected.
func (l *link) sharedLink() *sharedLink {
	l.mu.Lock()
	defer l.mu.Unlock()
	sl, _ := l.mu.opener.(*sharedLink)
	return sl
}

// pauseServing stops (or resumes) this node's serving of every mirror stream of topic, as
// a serving goroutine stuck on a slow disk would: its peers' mirrors of topic get nothing.
func (f *Federation) pauseServing(topic string, paused bool) { f.pause.set(topic, paused) }

// mirrorStreams is the number of mirrors holding a stream on the links to region, and the
// most the links ever held at once.
func (f *Federation) mirrorStreams(region string) (open, most int) {
	for _, l := range f.links() {
		if l.peer.Region != region {
			continue
		}
		l.mu.Lock()
		open += len(l.mu.mirrors)
		most = max(most, l.mu.mostOpen)
		l.mu.Unlock()
	}
	return open, most
}

// mirrorsOpened is how many mirrors the links to region opened since they began.
func (f *Federation) mirrorsOpened(region string) (n uint64) {
	for _, l := range f.links() {
		if l.peer.Region == region {
			l.mu.Lock()
			n += l.mu.opened
			l.mu.Unlock()
		}
	}
	return n
}

// mirrorState describes the link's view of topic's mirror from region, for a failure message.
func (f *Federation) mirrorState(region, topic string) string {
	for _, l := range f.links() {
		if l.peer.Region != region {
			continue
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		h := l.mu.health[topic]
		if h == nil {
			return "not mirrored"
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		return fmt.Sprintf("open %v queued %v announced %v known %v headNext %d reached %d; link: %d open, %d waiting",
			l.mu.mirrors[topic] != nil, l.mu.queued[topic], l.announcedLocked(topic), h.known, h.headNext, h.reached,
			len(l.mu.mirrors), len(l.mu.queued))
	}
	return "no link"
}

// linkTo is this node's link to the node named name (nil: none), and whether gossip's
// verdict that the peer failed is held against it (Peer.Failed).
func (f *Federation) linkTo(name string) (l *link, failed bool) {
	f.mu.Lock()
	l = f.mu.links[name]
	f.mu.Unlock()
	if l == nil {
		return nil, false
	}
	return l, l.failed.Load()
}

// paceListing makes this node list its topics on catalog streams page topics at a time,
// calling paged after each page is flushed (a test holds the listing there), with at most
// recent of the topics that moved last announced ahead of the listing.
func (f *Federation) paceListing(page, recent int, paged func()) {
	f.listing.Store(&listingHooks{page: page, paged: paged, recent: recent})
}
