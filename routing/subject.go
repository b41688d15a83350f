package routing

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Limits of the subject grammar. They bound what a peer can make a node store or
// walk per subject: MaxTopicLen bytes and MaxTokens trie levels.
const (
	MaxTopicLen = 255 // bytes, dots included
	MaxTokens   = 32  // dot-separated tokens, wildcards included
)

// Sentinels wrapped by every *SubjectError, so a caller can tell which check failed
// with errors.Is without parsing the message.
var (
	ErrInvalidTopic   = errors.New("routing: invalid topic")
	ErrInvalidPattern = errors.New("routing: invalid pattern")
)

// SubjectError names what is wrong with a topic or pattern and where.
// Error() reads like `routing: invalid topic "a..b": empty token at byte 2`.
type SubjectError struct {
	Subject string // the subject as given
	Pos     int    // byte offset of the problem in Subject, 0 <= Pos <= len(Subject)
	Reason  string // what is wrong, e.g. "empty token"
	Pattern bool   // Subject was checked as a pattern (ValidatePattern), not a topic
}

// errorQuoteMax bounds how much of a subject an error message repeats: subjects come
// from peers, and an error text may travel back over the wire.
const errorQuoteMax = 64

func (e *SubjectError) Error() string {
	kind := "topic"
	if e.Pattern {
		kind = "pattern"
	}
	s, more := e.Subject, ""
	if len(s) > errorQuoteMax {
		s, more = s[:errorQuoteMax], "..."
	}
	return fmt.Sprintf("routing: invalid %s %q%s: %s at byte %d", kind, s, more, e.Reason, e.Pos)
}

// Unwrap returns ErrInvalidPattern or ErrInvalidTopic.
func (e *SubjectError) Unwrap() error {
	if e.Pattern {
		return ErrInvalidPattern
	}
	return ErrInvalidTopic
}

// fault is the allocation-free result of scan; it becomes a *SubjectError only when a
// caller wants an error, so Match and Table.Match can validate without allocating.
type fault uint8

const (
	faultNone fault = iota
	faultEmptyToken
	faultTooLong
	faultTooManyTokens
	faultBadChar
	faultWildcardInTopic
	faultPartialWildcard
	faultFullWildcardNotLast
)

// tokenByte reports the bytes allowed in a literal token: [A-Za-z0-9_-].
var tokenByte = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	t['_'], t['-'] = true, true
	return t
}()

// scan checks s against the grammar in one pass and returns the first fault and its
// byte position. With pattern set, whole-token "*" and a last-token ">" are allowed.
func scan(s string, pattern bool) (fault, int) {
	if len(s) > MaxTopicLen {
		return faultTooLong, MaxTopicLen
	}
	tokens, start := 1, 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			if i == start {
				return faultEmptyToken, start
			}
			if i < len(s) {
				if pattern && i-start == 1 && s[start] == '>' {
					return faultFullWildcardNotLast, start
				}
				if tokens++; tokens > MaxTokens {
					return faultTooManyTokens, i + 1
				}
				start = i + 1
			}
			continue
		}
		c := s[i]
		if tokenByte[c] {
			continue
		}
		if c == '*' || c == '>' {
			if !pattern {
				return faultWildcardInTopic, i
			}
			if i != start || (i+1 < len(s) && s[i+1] != '.') {
				return faultPartialWildcard, i
			}
			continue
		}
		return faultBadChar, i
	}
	return faultNone, 0
}

// subjectError turns a fault from scan into the error callers see.
func subjectError(s string, pattern bool, f fault, pos int) error {
	var reason string
	switch f {
	case faultEmptyToken:
		reason = "empty token"
	case faultTooLong:
		reason = fmt.Sprintf("longer than %d bytes", MaxTopicLen)
	case faultTooManyTokens:
		reason = fmt.Sprintf("more than %d tokens", MaxTokens)
	case faultBadChar:
		r, size := utf8.DecodeRuneInString(s[pos:])
		if r == utf8.RuneError && size <= 1 {
			reason = fmt.Sprintf("invalid byte 0x%02x", s[pos])
		} else {
			reason = fmt.Sprintf("invalid character %q", r)
		}
	case faultWildcardInTopic:
		reason = fmt.Sprintf("wildcard '%c' not allowed in a topic", s[pos])
	case faultPartialWildcard:
		reason = fmt.Sprintf("wildcard '%c' must be a whole token", s[pos])
	case faultFullWildcardNotLast:
		reason = "wildcard '>' must be the last token"
	default:
		return nil
	}
	return &SubjectError{Subject: s, Pos: pos, Reason: reason, Pattern: pattern}
}

// ValidateTopic reports whether s is a concrete topic name (no wildcards).
// The error is a *SubjectError wrapping ErrInvalidTopic.
func ValidateTopic(s string) error {
	f, pos := scan(s, false)
	return subjectError(s, false, f, pos)
}

// ValidatePattern reports whether s is a subscription pattern: a topic in which
// tokens may also be "*", and the last token may be ">".
// The error is a *SubjectError wrapping ErrInvalidPattern.
func ValidatePattern(s string) error {
	f, pos := scan(s, true)
	return subjectError(s, true, f, pos)
}

// IsLiteral reports whether pattern contains no wildcard, that is whether it can
// match at most one topic (itself). It does not validate pattern.
func IsLiteral(pattern string) bool {
	return !strings.ContainsAny(pattern, "*>")
}
