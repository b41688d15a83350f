package wal

import (
	"errors"
	"fmt"
)

var (
	// ErrClosed is returned by every operation after Close, and to appends
	// that were still queued when Close was called.
	ErrClosed = errors.New("wal: closed")
	// ErrUnknownTopic is returned for a topic that has no durable record yet.
	ErrUnknownTopic = errors.New("wal: unknown topic")
	// ErrOffsetOutOfRange is matched (errors.Is) by *OffsetOutOfRangeError.
	ErrOffsetOutOfRange = errors.New("wal: offset out of range")
	// ErrCorrupt is returned when a stored value fails its checksum or does
	// not decode. The bad value is never served.
	ErrCorrupt = errors.New("wal: corrupt value")
	// ErrFailed is returned to every append after a synced commit failed:
	// the log refuses further appends until it is reopened (see package doc).
	ErrFailed = errors.New("wal: log failed")
	// ErrInvalidRequest is returned for a malformed request (empty or too long
	// topic or position name, nothing to append).
	ErrInvalidRequest = errors.New("wal: invalid request")
	// ErrTooLarge is returned for an append request that alone exceeds
	// Options.MaxBatchRecords or Options.MaxBatchBytes: a request is committed
	// atomically, so it must fit in one synced commit.
	ErrTooLarge = errors.New("wal: request too large")
	// ErrOutcomeUnknown is returned by Append when its context ended after
	// the committer had taken the request: the records may still become
	// durable.
	ErrOutcomeUnknown = errors.New("wal: append outcome unknown")
)

// OffsetOutOfRangeError reports a read before the first retained offset.
// errors.Is(err, ErrOffsetOutOfRange) is true for it.
type OffsetOutOfRangeError struct {
	Topic  string
	Offset uint64 // the offset asked for
	First  uint64 // the first retained offset: read from here instead
	Next   uint64 // the high-watermark at the time of the read
}

func (e *OffsetOutOfRangeError) Error() string {
	return fmt.Sprintf("wal: read %q at offset %d: offset out of range (first retained %d, next %d)",
		e.Topic, e.Offset, e.First, e.Next)
}

// Is makes errors.Is(err, ErrOffsetOutOfRange) true.
func (e *OffsetOutOfRangeError) Is(target error) bool { return target == ErrOffsetOutOfRange }

// CorruptError names the value that failed to decode. errors.Is(err,
// ErrCorrupt) is true for it.
type CorruptError struct {
	Topic  string // "" when the topic name is not known (e.g. a position)
	Offset uint64 // meaningful for records only
	Reason string
}

func (e *CorruptError) Error() string {
	if e.Topic == "" {
		return fmt.Sprintf("wal: corrupt value: %s", e.Reason)
	}
	return fmt.Sprintf("wal: corrupt record %q at offset %d: %s", e.Topic, e.Offset, e.Reason)
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }
