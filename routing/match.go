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
