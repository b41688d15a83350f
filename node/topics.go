package node

import (
	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/routing"
)

// listTopics answers a TOPICS stream: one TOPIC_INFO per matching topic, then FIN.
func (s *session) listTopics(str *quic.Stream, req *wire.Topics) {
	pattern := req.Pattern
	if pattern == "" {
		pattern = ">"
	}
	if err := routing.ValidatePattern(pattern); err != nil {
		s.failStream(str, &wire.Error{Code: wire.CodeInvalidTopic, Message: err.Error()})
		return
	}
	w := wire.NewWriter(str)
	for _, t := range s.n.wal.Topics() {
		if !routing.Match(pattern, t.Name) {
			continue
		}
		if w.Write(&wire.TopicInfo{Name: t.Name, First: t.First, Next: t.Next, Bytes: uint64(max(t.Bytes, 0))}) != nil {
			return
		}
	}
	w.Flush()
	str.Close() // the client closes its side after TOPICS; nothing more to read
}

// watchTopics is the node's topic watcher goroutine: when the log reports a new topic, it
// finds the subscriptions whose pattern matches (the interest table) and tells each one.
// It is the only reader of the known-topics set.
func (n *Node) watchTopics() {
	defer n.wg.Done()
	wake := make(chan struct{}, 1)
	cancel := n.wal.NotifyNewTopics(wake)
	defer cancel()
	known := make(map[string]struct{})
	for _, t := range n.wal.Topics() {
		known[t.Name] = struct{}{}
	}
	for {
		select {
		case <-n.stop:
			return
		case <-wake:
		}
		for _, t := range n.wal.Topics() {
			if _, ok := known[t.Name]; ok {
				continue
			}
			known[t.Name] = struct{}{}
			if n.place != nil {
				n.place.localTopicCreated(t.Name)
			}
			for _, sub := range n.interest.Match(t.Name) {
				sub.notifyNewTopic(t.Name)
			}
		}
	}
}
