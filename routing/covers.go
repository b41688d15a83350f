package routing

import "strings"

// Covers reports whether every topic that pattern matches is also matched by allowed: the
// check a permission needs before a subscription to pattern is served under a grant of
// allowed. Both must be valid patterns (a topic is a pattern without wildcards); an invalid
// one covers and is covered by nothing.
//
// Token by token: `>` in allowed covers the rest (one or more tokens, which pattern must
// have); `*` in allowed covers any single token of pattern, `*` included, but not `>`; a
// literal token covers only itself. So `orders.>` covers `orders.*.created` and `orders.eu`,
// `orders.*` covers `orders.eu` but not `orders.>`, and nothing but `>`-ending grants cover
// a pattern ending in `>`.
func Covers(allowed, pattern string) bool {
	if ValidatePattern(allowed) != nil || ValidatePattern(pattern) != nil {
		return false
	}
	a, p := allowed, pattern
	for {
		at, arest, amore := strings.Cut(a, ".")
		if at == ">" {
			return p != ""
		}
		if p == "" {
			return false
		}
		pt, prest, pmore := strings.Cut(p, ".")
		switch {
		case pt == ">":
			return false // only a ">" of allowed (handled above) covers one or more tokens
		case at == "*":
		case at != pt:
			return false
		}
		if amore != pmore {
			// One has tokens left and the other not: even a ">" left in allowed needs at
			// least one more token of pattern.
			return false
		}
		if !amore {
			return true
		}
		a, p = arest, prest
	}
}
