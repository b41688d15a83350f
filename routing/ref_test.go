package routing

import (
	"regexp"
	"strings"
)

// The reference implementation: deliberately naive and independent of the code
// under test (regular expressions for the grammar, strings.Split for matching).

var (
	refTopicRE   = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)
	refPatternRE = regexp.MustCompile(`^(([A-Za-z0-9_-]+|\*)\.)*([A-Za-z0-9_-]+|\*|>)$`)
)

func refValid(s string, pattern bool) bool {
	if len(s) > MaxTopicLen || strings.Count(s, ".")+1 > MaxTokens {
		return false
	}
	if pattern {
		return refPatternRE.MatchString(s)
	}
	return refTopicRE.MatchString(s)
}

// refMatch is the reference matcher: split on '.' and compare token by token.
func refMatch(pattern, topic string) bool {
	if !refValid(pattern, true) || !refValid(topic, false) {
		return false
	}
	return refMatchValid(pattern, topic)
}

// refMatchValid is refMatch for inputs known to be valid.
func refMatchValid(pattern, topic string) bool {
	pt, tt := strings.Split(pattern, "."), strings.Split(topic, ".")
	for i, p := range pt {
		if p == ">" {
			return len(tt) > i
		}
		if i >= len(tt) || (p != "*" && p != tt[i]) {
			return false
		}
	}
	return len(pt) == len(tt)
}
