package wal

import (
	"slices"
	"strings"
)

// PositionNames lists the distinct names of stored positions that start with prefix (for
// example the durable consumers of one tenant), sorted. Only durable positions are listed.
func (l *Log) PositionNames(prefix string) []string {
	l.mu.RLock()
	var out []string
	for name := range l.mu.positions {
		if strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	l.mu.RUnlock()
	slices.Sort(out)
	return out
}
