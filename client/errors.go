package client

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

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
	CodeLimit            Code = 6  // too many subscriptions on the connection, or connections or durable consumers of a tenant
	CodeNotFound         Code = 7  // unknown topic or durable consumer
	CodeOffsetOutOfRange Code = 8  // a start offset past the topic's head
	CodeUnavailable      Code = 9  // the topic's owner cannot be reached
	CodeInternal         Code = 10 // a failure inside the node (disk); a retry may work
	CodeShuttingDown     Code = 11 // the node is stopping; reconnect later or elsewhere
	CodeVersion          Code = 12 // the node does not speak this protocol version
	CodeInvalidArgument  Code = 13 // a field value is not accepted
	CodeSequence         Code = 14 // the publish's sequence is older than its producer's de-duplication window: nothing stored
	CodeConflict         Code = 15 // the consumer name is in use: an exclusive durable held by another subscriber, or a group with other settings
)

// String names the code as the protocol does ("invalid topic").
func (c Code) String() string { return wire.Code(c).String() }

// Error is an error reported by a node (an ERROR or PUBLISH_ERROR frame, or the application
// error code of a closed connection), or a limit the client checked before sending. Its text
// is the code's name and the reason ("invalid topic: empty token at byte 4"); the SDK returns
// it wrapped in the operation that failed, as in
// `client: publish to "bad..topic": invalid topic: empty token at byte 4`.
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code.String()
	}
	return e.Code.String() + ": " + e.Message
}

func errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// fromWire is the *Error for a node's ERROR or PUBLISH_ERROR frame. The node's message may
// repeat what the SDK's text says already (the code's name, or a package prefix and the
// subject as in `routing: invalid topic "a..b": empty token at byte 2`); that is cut, so the
// reason reads once.
func fromWire(code wire.Code, msg string) *Error {
	return &Error{Code: Code(code), Message: reason(Code(code), msg)}
}

// reason strips from a node's message the prefixes that repeat the error's code or
// operation: "quicmq: CODE: ", "CODE: ", and a Go package's "pkg: invalid topic "..."...: "
// (the subject is named by the SDK's operation), also where a node's sentence quotes such an
// error after its own ": ".
func reason(code Code, msg string) string {
	for {
		before := msg
		msg = strings.TrimPrefix(msg, "quicmq: ")
		msg = strings.TrimPrefix(msg, code.String()+": ")
		if rest, ok := cutSubjectPrefix(msg); ok {
			msg = rest
		}
		if msg == before {
			break
		}
	}
	for i := 0; ; {
		j := strings.Index(msg[i:], ": ")
		if j < 0 {
			return msg
		}
		i += j + 2
		if rest, ok := cutSubjectPrefix(msg[i:]); ok {
			msg = msg[:i] + rest
		}
	}
}

// cutSubjectPrefix cuts `invalid topic "SUBJECT"...: ` (or pattern), with or without a Go
// package's `pkg: ` before it, off msg.
func cutSubjectPrefix(msg string) (string, bool) {
	rest := msg // a node's own `invalid topic "...": ...`, or a package's before it
	if pkg, after, ok := strings.Cut(msg, ": "); ok && pkg != "" && !strings.ContainsAny(pkg, " \"") {
		rest = after
	}
	for _, kind := range []string{"invalid topic ", "invalid pattern "} {
		if after, ok := strings.CutPrefix(rest, kind); ok {
			subject, err := strconv.QuotedPrefix(after)
			if err != nil {
				return msg, false
			}
			after = strings.TrimPrefix(after[len(subject):], "...")
			if tail, ok := strings.CutPrefix(after, ": "); ok {
				return tail, true
			}
		}
	}
	return msg, false
}

// opError is an error of one SDK operation: "client: OP: REASON". The reason's own "client: "
// (an SDK error wrapped again) is dropped, so every error the SDK returns names the package
// once.
type opError struct {
	op  string
	err error
}

// wrap names the operation err failed (op, e.g. `publish to "orders"`).
func wrap(op string, err error) error { return &opError{op: op, err: err} }

func (e *opError) Error() string { return "client: " + e.op + ": " + text(e.err) }

// text is err's message without a leading "client: ", for use inside another SDK error.
func text(err error) string { return strings.TrimPrefix(err.Error(), "client: ") }

func (e *opError) Unwrap() error { return e.err }

// GapError reports that the records [From, To) of Topic were deleted (by retention or a
// purge) before the subscription reached them. Subscription.Next returns it once, in place of
// those records, and continues with offset To on the next call: a gap is never skipped
// silently. A durable consumer that acknowledges it (Subscription.AckGap) stores a position
// past it, and is not sent it again when it resumes.
type GapError struct {
	Topic    string
	From, To uint64
	gen      uint32 // the region generation it was delivered in (position.go), as Record's
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
		return fmt.Sprintf("client: publish to %q: %s: it may or may not be stored; publishing it again with ProducerID %q and Sequence %d is safe (a stored copy is answered as a duplicate)",
			e.Topic, text(e.Err), e.ProducerID, e.Sequence)
	}
	return fmt.Sprintf("client: publish to %q: %s: it may or may not be stored; publishing it again may store it twice (Options.Idempotent makes retries safe)", e.Topic, text(e.Err))
}

// Unwrap returns why the publish was cut off.
func (e *OutcomeUnknownError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrOutcomeUnknown) true.
func (e *OutcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }
