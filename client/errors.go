package client

import (
	"errors"
	"fmt"

	"github.com/quicmq/quicmq/internal/wire"
)

// ErrClosed is returned by operations on a Conn or Subscription after its Close, and by the
// Futures that were still pending when the Conn was closed.
var ErrClosed = errors.New("client: closed")

// Code classifies an error reported by a node. The values are the protocol's error codes
// (docs/protocol.md, "Error codes") and never change.
type Code uint64

// Error codes. Use errors.As to get the *Error and switch on its Code.
const (
	CodeProtocol         Code = 1  // a peer broke the protocol (malformed frame, wrong order)
	CodeUnauthorized     Code = 2  // missing or wrong token
	CodeForbidden        Code = 3  // authenticated, but not allowed on this topic
	CodeInvalidTopic     Code = 4  // topic or pattern breaks the grammar; the message says where
	CodeTooLarge         Code = 5  // payload, headers or frame over a limit
	CodeLimit            Code = 6  // too many streams, subscriptions or pending publishes
	CodeNotFound         Code = 7  // unknown topic or durable consumer
	CodeOffsetOutOfRange Code = 8  // the offset is no longer retained
	CodeUnavailable      Code = 9  // the topic's owner cannot be reached
	CodeInternal         Code = 10 // a failure inside the node (disk); a retry may work
	CodeShuttingDown     Code = 11 // the node is stopping; reconnect later or elsewhere
	CodeVersion          Code = 12 // the node does not speak this protocol version
	CodeInvalidArgument  Code = 13 // a field value is not accepted
	CodeSequence         Code = 14 // the publish's sequence is older than its producer's de-duplication window: nothing stored
)

// String names the code as the protocol does ("invalid topic").
func (c Code) String() string { return wire.Code(c).String() }

// Error is an error reported by a node (an ERROR or PUBLISH_ERROR frame, or the application
// error code of a closed connection), or a limit the client checked before sending.
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

func errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func fromWire(code wire.Code, msg string) *Error { return &Error{Code: Code(code), Message: msg} }

// GapError reports that the records [From, To) of Topic were deleted by retention before the
// subscription reached them. Subscription.Next returns it once, in place of those records,
// and continues with offset To on the next call: a gap is never skipped silently.
type GapError struct {
	Topic    string
	From, To uint64
}

func (e *GapError) Error() string {
	return fmt.Sprintf("client: topic %q: records [%d, %d) were deleted by retention before this subscription reached them", e.Topic, e.From, e.To)
}

// ErrOutcomeUnknown is matched (errors.Is) by *OutcomeUnknownError.
var ErrOutcomeUnknown = errors.New("client: publish outcome unknown")

// OutcomeUnknownError fails a publish that was sent but not answered: the connection was
// lost (or the Conn closed, or a resend gave up), so the record may or may not be stored.
// With a ProducerID and Sequence, publishing the same Message again (with these two) is
// safe: a node that stored it answers with its offset and Ack.Duplicate. Without them a
// retry may store the record twice. Err is why the publish was cut off.
type OutcomeUnknownError struct {
	Topic      string
	ProducerID string
	Sequence   uint64
	Err        error
}

func (e *OutcomeUnknownError) Error() string {
	if e.ProducerID != "" && e.Sequence > 0 {
		return fmt.Sprintf("client: publish to %q: %v: it may or may not be stored; publishing it again with ProducerID %q and Sequence %d is safe (a stored copy is answered as a duplicate)",
			e.Topic, e.Err, e.ProducerID, e.Sequence)
	}
	return fmt.Sprintf("client: publish to %q: %v: it may or may not be stored; publishing it again may store it twice (Options.Idempotent makes retries safe)", e.Topic, e.Err)
}

// Unwrap returns why the publish was cut off.
func (e *OutcomeUnknownError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrOutcomeUnknown) true.
func (e *OutcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }
