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
// of its own.
func (c *Conn) Topics(ctx context.Context, pattern string) ([]TopicInfo, error) {
	if pattern == "" {
		pattern = ">"
	}
	op := fmt.Sprintf("topics %q", pattern)
	if err := checkSubscribe(pattern, SubscribeOptions{}); err != nil {
		return nil, wrap(op, err)
	}
	var list []TopicInfo
	err := c.manage(ctx, op, &wire.Topics{Pattern: pattern}, func(f wire.Frame) error {
		t, ok := f.(*wire.TopicInfo)
		if !ok {
			return errorf(CodeProtocol, "the node sent %s on a listing stream", f.Type())
		}
		list = append(list, topicInfo(t))
		return nil
	})
	if err != nil {
		return nil, err
	}
	return list, nil
}

func topicInfo(t *wire.TopicInfo) TopicInfo {
	ti := TopicInfo{Name: t.Name, First: t.First, Next: t.Next, Bytes: t.Bytes, Leader: t.Leader, Replicas: t.Replicas}
	if t.RetentionSet {
		ti.Retention = &TopicRetention{MaxAge: time.Duration(min(t.RetentionAge, 1<<63-1)), MaxBytes: int64(min(t.RetentionBytes, 1<<63-1))}
	}
	return ti
}
