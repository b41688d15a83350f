package wal

import (
	"slices"
	"strings"
)

// PositionNames lists the distinct names of stored positions that start with prefix (for
// example the durable consumers of one tenant), sorted. Only durable positions are listed.
func (l *Log) PositionNames(prefix string) []string {
	l.mu.RLock()
	seen := make(map[string]struct{})
	for k := range l.mu.positions {
		if strings.HasPrefix(k.name, prefix) {
			seen[k.name] = struct{}{}
		}
	}
	l.mu.RUnlock()
	out := make([]string, 0, len(seen))
	for name := range seen {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}
