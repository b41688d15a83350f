package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"
	"github.com/quicmq/quicmq/node/manage"
	"github.com/quicmq/quicmq/routing"
	"github.com/quicmq/quicmq/wal"
)

// listPage is how many topics a listing reads from the log at a time.
const listPage = 512

// listTopics answers a TOPICS stream: one TOPIC_INFO per matching topic, then FIN. The rows
// stream from the log's own order (wal.TopicsPage: names in byte order, page by page, from
// the pattern's literal prefix), so a listing of any number of topics is never built as one
// answer: the stream's flow control paces the pages, and the node holds one page at a time.
func (s *session) listTopics(str *quic.Stream, req *wire.Topics) {
	pattern := req.Pattern
	if pattern == "" {
		pattern = ">"
	}
	if e := s.actor.CheckTopic(pattern, true); e != nil {
		s.failStream(str, e)
		return
	}
	pattern = s.actor.Topic(pattern)
	w := &topicLister{w: wire.NewWriter(str), actor: s.actor, version: s.version}
	if err := s.n.listLocalTopics(pattern, w.Write); err != nil {
		if !errors.Is(err, wal.ErrClosed) {
			return // the client went away
		}
		s.failStream(str, wire.Errorf(wire.CodeUnavailable, "topics: the node is stopping"))
		return
	}
	if s.n.place != nil && !s.peer && !s.n.rep.holdsAll() {
		s.listRegionTopics(w, pattern)
	}
	w.w.Flush()
	str.Close() // the client closes its side after TOPICS; nothing more to read
}

// listLocalTopics calls fn for each topic of this node's log that matches pattern, in name
// order, as a listing shows it: a conflict's other log left out, leader and replicas set.
func (n *Node) listLocalTopics(pattern string, fn func(*wire.TopicInfo) error) error {
	prefix := literalPrefix(pattern)
	for after := ""; ; {
		page, more, err := n.wal.TopicsPage(prefix, after, listPage)
		if err != nil {
			return err
		}
		for _, t := range page {
			if !routing.Match(pattern, t.Name) {
				continue
			}
			if n.place != nil && n.place.ServedElsewhere(t.Name) {
				continue // a conflict's other log: the listing shows the one that is served
			}
			ti := manage.TopicInfo(t)
			ti.Leader, ti.Replicas = n.topicHolders(t.Name)
			if err := fn(&ti); err != nil {
				return err
			}
		}
		if !more || len(page) == 0 {
			return nil
		}
		after = page[len(page)-1].Name
	}
}

// literalPrefix is what every topic pattern matches starts with: its tokens before the
// first wildcard, with their dot ("" when it starts with one). A literal pattern is its own
// prefix (the listing then matches it exactly).
func literalPrefix(pattern string) string {
	i := 0
	for {
		j := strings.IndexByte(pattern[i:], '.')
		tok := pattern[i:]
		if j >= 0 {
			tok = pattern[i : i+j]
		}
		if tok == "*" || tok == ">" {
			return pattern[:i]
		}
		if j < 0 {
			return pattern
		}
		i += j + 1
	}
}

// topicLister writes a listing in the client's view: its namespace taken off the names, and
// only the topics it may publish or subscribe to. remote remembers the topics that rows of
// the region's other nodes named (copyTopics), so that a replicated topic, which each of its
// replicas lists, or a conflict's, is written once; rows of this node's own log are not
// remembered (its log says what it listed), so a listing that this node answers alone (a
// single node, or a replicated region where every node holds every topic) holds no names.
type topicLister struct {
	w       *wire.Writer
	actor   *auth.Principal
	version uint64 // the session's protocol version: what a TOPIC_INFO carries
	remote  map[string]bool
}

func (l *topicLister) Write(t *wire.TopicInfo) error {
	if l.actor.Prefix != "" {
		c := *t
		c.Name = l.actor.ClientName(t.Name)
		t = &c
	}
	if l.actor.MaySubscribe(t.Name) != nil && l.actor.MayPublish(t.Name) != nil {
		return nil
	}
	return l.w.Write(topicInfoFor(l.version, t))
}

// topicInfoFor is t as protocol version v carries it (a listing's rows, a creation's
// answer); node/manage answers a management stream's TOPIC_CREATE by the same rule.
var topicInfoFor = manage.TopicInfoFor

// listRegionTopics adds the topics the region's other live nodes own to a client's listing,
// asking each over its link. A node that cannot be asked is logged and left out.
func (s *session) listRegionTopics(w *topicLister, pattern string) {
	n := s.n
	for _, m := range n.place.Members() {
		if m.Name == n.cfg.Name || m.Status != gossip.StatusAlive {
			continue
		}
		if err := s.copyTopics(w, m.Name, pattern); err != nil {
			n.log.Warn("topic listing: a node of the region could not be asked; its topics are left out", "node", m.Name, "err", err)
		}
	}
}

func (s *session) copyTopics(w *topicLister, node, pattern string) error {
	n := s.n
	ctx, cancel := context.WithTimeout(s.ctx, n.cfg.ManageTimeout)
	defer cancel()
	return n.streamTo(ctx, node, &wire.Topics{Pattern: pattern}, func(f wire.Frame) error {
		t, ok := f.(*wire.TopicInfo)
		if !ok {
			return fmt.Errorf("unexpected %s in a topic listing", f.Type())
		}
		if !keepListedRow(t, node, n.listedHere(t.Name) || w.remote[t.Name], n.place.Holders(t.Name)) {
			return nil
		}
		if w.remote == nil {
			w.remote = make(map[string]bool)
		}
		w.remote[t.Name] = true
		return w.Write(t)
	})
}

// listedHere reports whether this node's own part of a listing named topic (asked for a
// row of another node, which matched the same pattern): this node's log holds it, and it is
// not a conflict's other log.
func (n *Node) listedHere(topic string) bool {
	if _, _, ok := n.wal.Bounds(topic); !ok {
		return false
	}
	return !n.place.ServedElsewhere(topic)
}

// keepListedRow decides whether a listing keeps the row that node, another node of the
// region, sent for topic t from its log. listed: the listing has named t already (from this
// node's log, or another node's row); holders: the nodes this node's catalogs (and log) say
// hold t, which may lag behind the logs. Each topic is listed once:
//   - a replicated topic (more than one replica, placed by raft) from the first row, not the
//     catalogs' owner: a topic just created may be in no catalog yet, and a replica here that
//     has not yet applied its first records lacks it too;
//   - a single-copy topic from the node whose copy is served: the one holder, or of two logs
//     under one name (a conflict) the one routing.Owner picks. node counts as a holder even
//     when no catalog says so yet.
func keepListedRow(t *wire.TopicInfo, node string, listed bool, holders []string) bool {
	if listed {
		return false
	}
	if len(t.Replicas) > 1 {
		return true
	}
	if !slices.Contains(holders, node) {
		holders = append(slices.Clip(holders), node) // a copy: the caller's slice stays as it was
	}
	return routing.Owner(t.Name, holders) == node
}

// watchTopics is the node's topic watcher goroutine: when the log reports a new topic, it
// finds the subscriptions whose pattern matches (the interest table) and tells each one.
func (n *Node) watchTopics() {
	defer n.wg.Done()
	wake := make(chan struct{}, 1)
	cancel := n.wal.NotifyNewTopics(wake)
	defer cancel()
	// The log names each topic created after the mark (one created again is named again,
	// and new again), so a batch that creates topics costs what it creates, not a listing
	// of every topic.
	_, mark := n.wal.CreatedSince(-1)
	for {
		select {
		case <-n.stop:
			return
		case <-wake:
		}
		var names []string
		names, mark = n.wal.CreatedSince(mark)
		seen := make(map[string]bool, len(names))
		for _, name := range names {
			if _, _, ok := n.wal.Bounds(name); !ok || seen[name] {
				continue // deleted since, or deleted and created again: told once
			}
			seen[name] = true
			if n.place != nil {
				n.place.LocalTopicCreated(name)
			}
			for _, sub := range n.interest.Match(name) {
				sub.NotifyNewTopic(name)
			}
		}
	}
}

// topicHolders is what a listing says of a topic this node holds: the leader and replicas
// of a replicated topic, or this node as the one holder of a single-copy one.
func (n *Node) topicHolders(topic string) (leader string, replicas []string) {
	if n.topics.IsReplicated(topic) {
		return n.rep.holders(topic)
	}
	return n.cfg.Name, []string{n.cfg.Name}
}
