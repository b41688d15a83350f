package wire

import (
	"errors"
	"fmt"
)

// Decoding errors. Each is wrapped with the frame type and the field that was wrong.
var (
	// ErrFrameTooLarge: a frame's declared body length exceeds Limits.MaxFrame. The stream
	// cannot be resynchronised after it and must be closed.
	ErrFrameTooLarge = errors.New("wire: frame too large")
	// ErrMalformed: a body does not parse (truncated field, over-long varint, trailing bytes,
	// a field over its limit, an unknown frame type).
	ErrMalformed = errors.New("wire: malformed frame")
)

// Code is an error code carried by ERROR and PUBLISH_ERROR frames. Codes are stable: they are
// part of the protocol (docs/protocol.md).
type Code uint64

const (
	CodeProtocol         Code = 1  // the peer broke the protocol (malformed frame, wrong order)
	CodeUnauthorized     Code = 2  // missing or wrong token
	CodeForbidden        Code = 3  // authenticated, but not allowed on this topic
	CodeInvalidTopic     Code = 4  // topic or pattern violates the subject grammar
	CodeTooLarge         Code = 5  // payload, header or frame over its limit
	CodeLimit            Code = 6  // a count limit: subscriptions of a connection, connections or durable consumers of a tenant
	CodeNotFound         Code = 7  // unknown topic or durable consumer
	CodeOffsetOutOfRange Code = 8  // a start offset past the topic's head (a deleted offset is a GAP, not this)
	CodeUnavailable      Code = 9  // the topic's owner is unreachable
	CodeInternal         Code = 10 // a failure inside the node (disk); the operation may be retried
	CodeShuttingDown     Code = 11 // the node is stopping; reconnect elsewhere or later
	CodeVersion          Code = 12 // unsupported protocol version
	CodeInvalidArgument  Code = 13 // a field has a value the node does not accept
	CodeSequence         Code = 14 // a publish's sequence is older than its producer's de-duplication window
	CodeConflict         Code = 15 // a consumer name in use: an exclusive durable held elsewhere, a group with other settings
)

var codeNames = map[Code]string{
	CodeProtocol:         "protocol error",
	CodeUnauthorized:     "unauthorized",
	CodeForbidden:        "forbidden",
	CodeInvalidTopic:     "invalid topic",
	CodeTooLarge:         "too large",
	CodeLimit:            "limit exceeded",
	CodeNotFound:         "not found",
	CodeOffsetOutOfRange: "offset out of range",
	CodeUnavailable:      "unavailable",
	CodeInternal:         "internal error",
	CodeShuttingDown:     "shutting down",
	CodeVersion:          "unsupported version",
	CodeInvalidArgument:  "invalid argument",
	CodeSequence:         "sequence outside the de-duplication window",
	CodeConflict:         "conflict",
}

func (c Code) String() string {
	if s, ok := codeNames[c]; ok {
		return s
	}
	return fmt.Sprintf("code %d", uint64(c))
}

// Error is an error that crosses the wire: the node sends it in ERROR or PUBLISH_ERROR frames
// and the client returns it to the application, so callers can use errors.As and switch on
// the Code.
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "quicmq: " + e.Code.String()
	}
	return "quicmq: " + e.Code.String() + ": " + e.Message
}

// Errorf builds an *Error with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// QUIC application error codes used when a whole connection or stream is aborted
// (CloseWithError, CancelRead, CancelWrite). Details travel in an ERROR frame first when
// possible.
const (
	AppNoError      = 0x0
	AppProtocol     = 0x1
	AppUnauthorized = 0x2
	AppShutdown     = 0x3
	AppCancelled    = 0x4 // a subscription or request abandoned by its opener
	AppLimit        = 0x5
)
