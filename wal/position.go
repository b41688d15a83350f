package wal

import (
	"context"
	"fmt"
)

// SetPosition stores a named position with a synced write, ordered after
// every append queued before it. It returns once the write is durable.
func (l *Log) SetPosition(ctx context.Context, p Position) error {
	return l.Append(ctx, AppendRequest{Position: &p}).Err
}

// Position returns a stored position and whether it exists. Only durable
// values are returned: positions are served from memory (loaded at Open,
// updated after each synced commit), never from what Pebble shows before
// its fsync.
func (l *Log) Position(name, topic string) (uint64, bool, error) {
	l.db.RLock()
	closed := l.db.closed
	l.db.RUnlock()
	if closed {
		return 0, false, fmt.Errorf("wal: position %q of %q: %w", name, topic, ErrClosed)
	}
	l.mu.RLock()
	v, ok := l.mu.positions[posName{name: name, topic: topic}]
	l.mu.RUnlock()
	return v, ok, nil
}
