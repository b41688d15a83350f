package client

import (
	"context"
	"fmt"
	"time"

	"github.com/quicmq/quicmq/internal/wire"
)

// TopicInfo describes one topic of a node's region.
type TopicInfo struct {
	Name  string
	First uint64 // first retained offset
	Next  uint64 // the offset the next record will get (the durable high-watermark)
	Bytes uint64 // approximate stored bytes
	// Retention is the topic's own retention (CreateTopic); nil: the node's default applies.
	Retention *TopicRetention
	// Leader is the node that takes the topic's publishes: the leader of its raft group in a
	// replicated region, the owner of a single-copy topic ("" when none is known). Replicas
	// are the nodes holding its log.
	Leader   string
	Replicas []string
}

// Records is the number of retained records.
func (t TopicInfo) Records() uint64 {
	if t.Next < t.First {
		return 0
	}
	return t.Next - t.First
}

// Topics lists the topics matching pattern ("" or ">" for all), sorted by name, on a stream
// of its own. It builds the whole list: over many topics, TopicsEach hands over each as it
// arrives.
func (c *Conn) Topics(ctx context.Context, pattern string) ([]TopicInfo, error) {
	var list []TopicInfo
	if err := c.TopicsEach(ctx, pattern, func(t TopicInfo) error {
		list = append(list, t)
		return nil
	}); err != nil {
		return nil, err
	}
	return list, nil
}

// TopicsEach is Topics streamed: it calls fn for each topic as the node's listing delivers
// it (each node's topics sorted by name), holding none of them, and returns fn's first error
// (which ends the listing) or the listing's. The stream's flow control paces the node.
func (c *Conn) TopicsEach(ctx context.Context, pattern string, fn func(TopicInfo) error) error {
	if pattern == "" {
		pattern = ">"
	}
	op := fmt.Sprintf("topics %q", pattern)
	if err := checkSubscribe(pattern, SubscribeOptions{}); err != nil {
		return wrap(op, err)
	}
	return c.manage(ctx, op, &wire.Topics{Pattern: pattern}, func(f wire.Frame) error {
		t, ok := f.(*wire.TopicInfo)
		if !ok {
			return errorf(CodeProtocol, "the node sent %s on a listing stream", f.Type())
		}
		return fn(topicInfo(t))
	})
}

func topicInfo(t *wire.TopicInfo) TopicInfo {
	ti := TopicInfo{Name: t.Name, First: t.First, Next: t.Next, Bytes: t.Bytes, Leader: t.Leader, Replicas: t.Replicas}
	if t.RetentionSet {
		ti.Retention = &TopicRetention{MaxAge: time.Duration(min(t.RetentionAge, 1<<63-1)), MaxBytes: int64(min(t.RetentionBytes, 1<<63-1))}
	}
	return ti
}
