package routing

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateTopic(t *testing.T) {
	long := strings.Repeat("a", MaxTopicLen)
	tokens32 := strings.Repeat("a.", MaxTokens-1) + "a"
	tests := []struct {
		in   string
		want string // "" for valid
	}{
		{"a", ""},
		{"orders.eu.created", ""},
		{"A-Z_09.x", ""},
		{long, ""},
		{tokens32, ""},
		{"", `routing: invalid topic "": empty token at byte 0`},
		{".a", `routing: invalid topic ".a": empty token at byte 0`},
		{"a..b", `routing: invalid topic "a..b": empty token at byte 2`},
		{"a.", `routing: invalid topic "a.": empty token at byte 2`},
		{"a.*", `routing: invalid topic "a.*": wildcard '*' not allowed in a topic at byte 2`},
		{">", `routing: invalid topic ">": wildcard '>' not allowed in a topic at byte 0`},
		{"a.b*", `routing: invalid topic "a.b*": wildcard '*' not allowed in a topic at byte 3`},
		{"a b", `routing: invalid topic "a b": invalid character ' ' at byte 1`},
		{"a/b", `routing: invalid topic "a/b": invalid character '/' at byte 1`},
		{"a\x00", `routing: invalid topic "a\x00": invalid character '\x00' at byte 1`},
		{"caf\u00e9", `routing: invalid topic "café": invalid character 'é' at byte 3`},
		{"a\xff", `routing: invalid topic "a\xff": invalid byte 0xff at byte 1`},
		{long + "a", `routing: invalid topic "` + long[:64] + `"...: longer than 255 bytes at byte 255`},
		{tokens32 + ".b", `routing: invalid topic "` + tokens32 + `."...: more than 32 tokens at byte 64`},
	}
	for _, tt := range tests {
		err := ValidateTopic(tt.in)
		if tt.want == "" {
			if err != nil {
				t.Errorf("ValidateTopic(%q) = %v, want nil", tt.in, err)
			}
			continue
		}
		if err == nil || err.Error() != tt.want {
			t.Errorf("ValidateTopic(%q) = %v\nwant %s", tt.in, err, tt.want)
			continue
		}
		var se *SubjectError
		if !errors.As(err, &se) || se.Subject != tt.in || se.Pattern {
			t.Errorf("ValidateTopic(%q): error %#v is not a topic *SubjectError for the input", tt.in, err)
		}
		if !errors.Is(err, ErrInvalidTopic) || errors.Is(err, ErrInvalidPattern) {
			t.Errorf("ValidateTopic(%q): error does not wrap exactly ErrInvalidTopic", tt.in)
		}
	}
}

func TestValidatePattern(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"a", ""},
		{"*", ""},
		{">", ""},
		{"a.*.c", ""},
		{"a.>", ""},
		{"*.*.>", ""},
		{"", `routing: invalid pattern "": empty token at byte 0`},
		{"a..>", `routing: invalid pattern "a..>": empty token at byte 2`},
		{"a.>.b", `routing: invalid pattern "a.>.b": wildcard '>' must be the last token at byte 2`},
		{">.>", `routing: invalid pattern ">.>": wildcard '>' must be the last token at byte 0`},
		{"a.b*", `routing: invalid pattern "a.b*": wildcard '*' must be a whole token at byte 3`},
		{"a.*b", `routing: invalid pattern "a.*b": wildcard '*' must be a whole token at byte 2`},
		{"**", `routing: invalid pattern "**": wildcard '*' must be a whole token at byte 0`},
		{"a.>>", `routing: invalid pattern "a.>>": wildcard '>' must be a whole token at byte 2`},
		{"a.#", `routing: invalid pattern "a.#": invalid character '#' at byte 2`},
		{strings.Repeat("*.", MaxTokens) + ">", `routing: invalid pattern "` + strings.Repeat("*.", 32) + `"...: more than 32 tokens at byte 64`},
	}
	for _, tt := range tests {
		err := ValidatePattern(tt.in)
		if tt.want == "" {
			if err != nil {
				t.Errorf("ValidatePattern(%q) = %v, want nil", tt.in, err)
			}
			continue
		}
		if err == nil || err.Error() != tt.want {
			t.Errorf("ValidatePattern(%q) = %v\nwant %s", tt.in, err, tt.want)
			continue
		}
		if !errors.Is(err, ErrInvalidPattern) || errors.Is(err, ErrInvalidTopic) {
			t.Errorf("ValidatePattern(%q): error does not wrap exactly ErrInvalidPattern", tt.in)
		}
	}
}

func TestIsLiteral(t *testing.T) {
	for in, want := range map[string]bool{
		"a.b": true, "a": true, "a.*": false, "a.>": false, "*": false, ">": false,
	} {
		if got := IsLiteral(in); got != want {
			t.Errorf("IsLiteral(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestMatch(t *testing.T) {
	tests := []struct {
		pattern, topic string
		want           bool
	}{
		{"a", "a", true},
		{"a", "b", false},
		{"a.b", "a.b", true},
		{"a.b", "a", false},
		{"a", "a.b", false},
		{"*", "a", true},
		{"*", "a.b", false},
		{"a.*", "a.b", true},
		{"a.*", "a", false},
		{"*.b", "a.b", true},
		{"*.*", "a.b", true},
		{">", "a", true},
		{">", "a.b.c", true},
		{"a.>", "a", false},
		{"a.>", "a.b", true},
		{"a.>", "a.b.c", true},
		{"a.>", "b.c", false},
		{"a.*.>", "a.b", false},
		{"a.*.>", "a.b.c", true},
		{"ab", "a", false},
		{"a", "ab", false},
		// Invalid input never matches.
		{"a.*", "a.*", false},
		{"a..b", "a..b", false},
		{"a.>.b", "a.x.b", false},
		{"", "", false},
		{">", "", false},
		{"*", "a.*", false},
	}
	for _, tt := range tests {
		if got := Match(tt.pattern, tt.topic); got != tt.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tt.pattern, tt.topic, got, tt.want)
		}
		if got := refMatch(tt.pattern, tt.topic); got != tt.want {
			t.Errorf("refMatch(%q, %q) = %v, want %v (the reference is wrong)", tt.pattern, tt.topic, got, tt.want)
		}
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	allocs := testing.AllocsPerRun(100, func() {
		Match("orders.*.created.>", "orders.eu.created.x.y")
	})
	if allocs != 0 {
		t.Fatalf("Match allocates %v times per call", allocs)
	}
}
