package federation

import (
	"slices"
	"strings"

	"github.com/quicmq/quicmq/routing"
)

// patternSet is a set of watched patterns (a link's, a catalog stream's), matched against a
// topic with one map lookup for its literal patterns and a Match per wildcard one. A node's
// interest holds a literal pattern per subscription to one topic, so a set can hold
// hundreds of them: matching each topic against every pattern in turn made a change of
// interest cost the link topics x patterns Matches (issue 34's figure 3: 100 subscriptions
// set up beside 10,000 parked mirrors, 13 to 400 ms of the link's goroutine per change).
// Immutable once made.
type patternSet struct {
	list    []string            // as given
	literal map[string]struct{} // the patterns without a wildcard
	wild    []string            // the others
}

func newPatternSet(patterns []string) *patternSet {
	s := &patternSet{list: patterns, literal: make(map[string]struct{})}
	for _, p := range patterns {
		if routing.IsLiteral(p) {
			s.literal[p] = struct{}{}
		} else {
			s.wild = append(s.wild, p)
		}
	}
	return s
}

// match reports whether topic matches a pattern of the set.
func (s *patternSet) match(topic string) bool {
	if s == nil {
		return false
	}
	if _, ok := s.literal[topic]; ok {
		return true
	}
	for _, p := range s.wild {
		if routing.Match(p, topic) {
			return true
		}
	}
	return false
}

// addedTo returns the patterns of s that before does not hold, and whether s holds every
// pattern of before (it only adds).
func (s *patternSet) addedTo(before *patternSet) (added []string, onlyAdds bool) {
	if before == nil {
		return s.list, true
	}
	return s.missingFrom(before), len(before.missingFrom(s)) == 0
}

// missingFrom returns the patterns of s that o does not hold.
func (s *patternSet) missingFrom(o *patternSet) []string {
	var out []string
	for _, p := range s.list {
		if _, ok := o.literal[p]; ok || slices.Contains(o.wild, p) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// listPrefixes are the name prefixes a listing for patterns must cover: each pattern's
// tokens before its first wildcard ("orders.eu." for "orders.eu.>", the name itself for a
// literal pattern, "" for ">" or "*.x": every name), fewest first, none under another.
func listPrefixes(patterns []string) []string {
	var out []string
	for _, p := range patterns {
		prefix := p
		if i := strings.IndexAny(p, "*>"); i >= 0 {
			prefix = p[:i]
		}
		out = append(out, prefix)
	}
	slices.Sort(out)
	out = slices.Compact(out)
	kept := out[:0]
	for _, p := range out {
		if len(kept) > 0 && strings.HasPrefix(p, kept[len(kept)-1]) {
			continue // listed under a shorter prefix
		}
		kept = append(kept, p)
	}
	return kept
}
