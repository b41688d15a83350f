package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
)

// Every error the SDK builds reads as one sentence: "client: " once, the operation, the
// reason once; errors.Is and errors.As still find the sentinels and the *Error under it.
func TestErrorStrings(t *testing.T) {
	lost := func(e error) error { return wrap("connection to 127.0.0.1:7400 lost", e) }
	refusedErr := wrap("dial 127.0.0.1:7999", &refusedError{err: syscall.ECONNREFUSED})
	for _, tc := range []struct {
		err  error
		want string
		code Code  // the *Error's code, 0: none in the chain
		is   error // a sentinel errors.Is must find, nil: none
	}{
		{wrap(publishOp("bad..topic"), fromWire(4, `routing: invalid topic "bad..topic": empty token at byte 4`)),
			`client: publish to "bad..topic": invalid topic: empty token at byte 4`, CodeInvalidTopic, nil},
		{wrap(`subscribe "a.>.b"`, fromWire(4, `routing: invalid pattern "a.>.b": '>' must be the last token at byte 2`)),
			`client: subscribe "a.>.b": invalid topic: '>' must be the last token at byte 2`, CodeInvalidTopic, nil},
		{wrap(publishOp("bad..topic"), fromWire(4, `invalid topic "bad..topic": empty token at byte 4`)),
			`client: publish to "bad..topic": invalid topic: empty token at byte 4`, CodeInvalidTopic, nil},
		{wrap(publishOp("x"), fromWire(4, `"x" is too long or has too many tokens inside tenant "acme"'s namespace ("acme."): invalid topic "acme.x"...: longer than 255 bytes at byte 255`)),
			`client: publish to "x": invalid topic: "x" is too long or has too many tokens inside tenant "acme"'s namespace ("acme."): longer than 255 bytes at byte 255`, CodeInvalidTopic, nil},
		{wrap(publishOp("long"), fromWire(4, `routing: invalid topic "aaaa"...: longer than 255 bytes at byte 255`)),
			`client: publish to "long": invalid topic: longer than 255 bytes at byte 255`, CodeInvalidTopic, nil},
		{wrap(publishOp("x"), fromWire(4, `"x" is too long or has too many tokens inside tenant "acme"'s namespace ("acme."): routing: invalid topic "acme.x"...: longer than 255 bytes at byte 255`)),
			`client: publish to "x": invalid topic: "x" is too long or has too many tokens inside tenant "acme"'s namespace ("acme."): longer than 255 bytes at byte 255`, CodeInvalidTopic, nil},
		{wrap(publishOp("t"), fromWire(5, "quicmq: too large: payload of 9 bytes over the limit of 8")),
			`client: publish to "t": too large: payload of 9 bytes over the limit of 8`, CodeTooLarge, nil},
		{wrap(publishOp("t"), fromWire(3, `token #1 (tenant acme) may not publish to "t" (allowed: orders.>)`)),
			`client: publish to "t": forbidden: token #1 (tenant acme) may not publish to "t" (allowed: orders.>)`, CodeForbidden, nil},
		{wrap(publishOp("t"), fromWire(9, `the owner of the topic, node "n2" of region "eu", cannot be reached: timeout; nothing was appended`)),
			`client: publish to "t": unavailable: the owner of the topic, node "n2" of region "eu", cannot be reached: timeout; nothing was appended`, CodeUnavailable, nil},
		{wrap(publishOp("t"), lost(&Error{Code: CodeShuttingDown, Message: "node stopping"})),
			`client: publish to "t": connection to 127.0.0.1:7400 lost: shutting down: node stopping`, CodeShuttingDown, nil},
		{wrap(publishOp("t"), ErrClosed), `client: publish to "t": closed`, 0, ErrClosed},
		{wrap("flush", context.DeadlineExceeded), `client: flush: context deadline exceeded`, 0, context.DeadlineExceeded},
		{wrap(`topics ">"`, fromWire(2, "")), `client: topics ">": unauthorized`, CodeUnauthorized, nil},
		{wrap("dial 127.0.0.1:7400", fromWire(2, "unauthorized: a valid token is required")),
			`client: dial 127.0.0.1:7400: unauthorized: a valid token is required`, CodeUnauthorized, nil},
		{&OutcomeUnknownError{Topic: "t", Err: lost(errors.New("timeout: no recent network activity"))},
			`client: publish to "t": connection to 127.0.0.1:7400 lost: timeout: no recent network activity: it may or may not be stored; publishing it again may store it twice (Options.Idempotent makes retries safe)`,
			0, ErrOutcomeUnknown},
		{refusedErr, `client: dial 127.0.0.1:7999: connection refused (nothing listens on that UDP port)`, 0, syscall.ECONNREFUSED},
		{nodesError{refusedErr, wrap("dial 127.0.0.1:7400", fromWire(11, "node stopping"))},
			`client: dial 127.0.0.1:7999: connection refused (nothing listens on that UDP port); dial 127.0.0.1:7400: shutting down: node stopping`,
			CodeShuttingDown, syscall.ECONNREFUSED},
		{wrap(publishOp("t"), fmt.Errorf("the node ended the publish stream: %w", fromWire(1, "wire: PUBLISH: malformed"))),
			`client: publish to "t": the node ended the publish stream: protocol error: wire: PUBLISH: malformed`, CodeProtocol, nil},
	} {
		got := tc.err.Error()
		if got != tc.want {
			t.Errorf("got  %s\nwant %s", got, tc.want)
		}
		if !strings.HasPrefix(got, "client: ") || strings.Count(got, "client: ") != 1 ||
			strings.Contains(got, "quicmq: ") || strings.Contains(got, "routing: ") {
			t.Errorf("%q: want exactly one prefix, \"client: \"", got)
		}
		var e *Error
		found := errors.As(tc.err, &e)
		if tc.code == 0 && found {
			t.Errorf("%q: unexpected *Error %v in the chain", got, e)
		}
		if tc.code != 0 && (!found || e.Code != tc.code) {
			t.Errorf("%q: errors.As finds %v, want code %v", got, e, tc.code)
		}
		if tc.is != nil && !errors.Is(tc.err, tc.is) {
			t.Errorf("%q: errors.Is(%v) is false", got, tc.is)
		}
	}
}

// reason leaves a message alone unless a prefix repeats what the error says already.
func TestReasonKeepsOtherMessages(t *testing.T) {
	for _, msg := range []string{
		"",
		"empty token at byte 4",
		`"orders.x" is too long or has too many tokens inside tenant "acme"'s namespace ("acme.")`,
		`read position of "billing" on "orders": pebble: closed`,
		`topic "a": context canceled`,
		`routing: invalid topic without a quote: x`,
	} {
		if got := reason(CodeInvalidTopic, msg); got != msg {
			t.Errorf("reason(%q) = %q, want it unchanged", msg, got)
		}
	}
}
