package wal

import (
	"context"
	"fmt"
)

// A clock mark is a point on the log's clock between the records appended before it and
// those appended after it: a consumer group from "latest" stores one as its start
// (node/groups), so that where it starts on a topic, one that existed when it started or one
// created later, is a function of the log alone, the same after a restart as before. Every
// record appended before the mark has a time below it, and every record appended after it a
// time at or above it (the committer never gives a record a time below clockFloor, which a
// mark raises); OffsetForTime(topic, mark) is then the first record of topic appended after
// the mark.
//
// The floor lives in memory. After a restart the committer's times start at the largest
// time of the recovered records (lastStamp), and a group that loads a stored mark raises the
// floor to it (RaiseClock); a wall clock that went back across a restart, past a mark no
// record reached yet, can give a record appended before that group loads a time below its
// mark.

// ClockMark returns a new mark: it is queued behind every append queued before it and
// returns once all of them are durable and readable, so OffsetForTime over the log as it is
// then already finds every record below the mark.
func (l *Log) ClockMark(ctx context.Context) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("wal: clock mark: %w", err)
	}
	op := &adminOp{kind: opMark}
	ch := make(chan AppendResult, 1)
	r := &request{admin: op, done: func(res AppendResult) { ch <- res }}
	if err := l.await(ctx, r, ch).Err; err != nil {
		return 0, err
	}
	return op.mark, nil
}

// RaiseClock makes every record appended from now on take a time of at least t.
func (l *Log) RaiseClock(t int64) {
	for {
		cur := l.clockFloor.Load()
		if t <= cur || l.clockFloor.CompareAndSwap(cur, t) {
			return
		}
	}
}

// markLocked sets op's mark: above every time given so far, and the floor of every time
// given from now on. Committer goroutine.
func (l *Log) markLocked(op *adminOp) {
	m := max(l.opts.Now().UnixNano(), l.clockFloor.Load(), l.c.lastStamp+1)
	l.RaiseClock(m)
	op.mark = m
}
