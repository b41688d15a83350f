package routing

import "strings"

// Match reports whether pattern matches topic. It is meant for a valid pattern and
// topic; if either is invalid it returns false. It never panics and does not allocate.
func Match(pattern, topic string) bool {
	if f, _ := scan(pattern, true); f != faultNone {
		return false
	}
	if f, _ := scan(topic, false); f != faultNone {
		return false
	}
	return matchValid(pattern, topic)
}

// matchValid is Match for an already validated pattern and topic: both are then
// non-empty and have no empty tokens, which the loop relies on.
func matchValid(pattern, topic string) bool {
	for {
		pt, prest, pmore := strings.Cut(pattern, ".")
		if pt == ">" {
			return true // topic still has at least one token here
		}
		tt, trest, tmore := strings.Cut(topic, ".")
		if pt != "*" && pt != tt {
			return false
		}
		if !pmore || !tmore {
			return pmore == tmore
		}
		pattern, topic = prest, trest
	}
}

// Matcher matches one pattern, validated once, against many topics that are already
// valid (a log's topic names): what Match does per topic, without scanning the pattern
// each time. The zero Matcher matches nothing.
type Matcher struct {
	pattern string
	prefix  string // a pattern "a.b.>": "a.b." (the common wildcard over a subtree)
	ok      bool
}

// NewMatcher returns the Matcher of pattern, or an error naming what is wrong with it.
func NewMatcher(pattern string) (Matcher, error) {
	if err := ValidatePattern(pattern); err != nil {
		return Matcher{}, err
	}
	m := Matcher{pattern: pattern, ok: true}
	if p, ok := strings.CutSuffix(pattern, ">"); ok && !strings.ContainsRune(p, '*') {
		m.prefix = p // "" for ">": every topic
	}
	return m, nil
}

// Match reports whether topic, a valid topic name, matches the pattern.
func (m Matcher) Match(topic string) bool {
	if !m.ok {
		return false
	}
	if m.prefix != "" || m.pattern == ">" {
		return len(topic) > len(m.prefix) && strings.HasPrefix(topic, m.prefix)
	}
	return matchValid(m.pattern, topic)
}
