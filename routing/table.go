package routing

import (
	"strings"
	"sync"
)

// cacheMax bounds the number of topics whose Match result a Table keeps. A change
// to a wildcard pattern scans the whole cache (see invalidateLocked), so the bound
// trades hit rate for the cost of subscribing with a wildcard; NATS's sublist uses
// the same size. When full, the oldest quarter of the entries is dropped.
const cacheMax = 1024

// Table is an interest table: a set of (pattern, v) entries that answers which v
// want a given topic. Patterns live in a token trie (one level per token, as in
// NATS's sublist) so a lookup walks only the branches the topic can reach, whatever
// the number of patterns. Results of recent lookups are cached per topic; every
// change invalidates exactly the cached topics the changed pattern matches.
//
// Table is safe for concurrent use. Its zero value is not usable; call NewTable.
type Table[T comparable] struct {
	mu   sync.RWMutex // guards root and n; taken before cache
	root node[T]
	n    int // number of (pattern, v) entries

	cache resultCache[T] // has its own lock, taken after mu when both are held
}

// resultCache maps topics to Match results. The entries live in a slice, indexed by
// a map: a wildcard change must scan every entry, and a slice scans several times
// faster than ranging over a map.
type resultCache[T comparable] struct {
	sync.RWMutex
	idx  map[string]int // topic -> position in list
	list []cachedResult[T]
}

type cachedResult[T comparable] struct {
	topic string
	r     []T
}

func (c *resultCache[T]) getLocked(topic string) ([]T, bool) {
	i, ok := c.idx[topic]
	if !ok {
		return nil, false
	}
	return c.list[i].r, true
}

func (c *resultCache[T]) putLocked(topic string, r []T) {
	// Concurrent misses on one topic (both under mu's read lock, so with equal
	// results) must not leave two entries for it: the index would lose one.
	if i, ok := c.idx[topic]; ok {
		c.list[i].r = r
		return
	}
	if len(c.list) >= cacheMax {
		// Drop the oldest quarter (swap-removes disturb the order a little) and
		// rebuild the index: O(cacheMax) once per cacheMax/4 inserts.
		n := copy(c.list, c.list[cacheMax/4:])
		clear(c.list[n:])
		c.list = c.list[:n]
		clear(c.idx)
		for i, e := range c.list {
			c.idx[e.topic] = i
		}
	}
	c.idx[topic] = len(c.list)
	c.list = append(c.list, cachedResult[T]{topic, r})
}

// deleteAtLocked removes entry i by moving the last entry into its place.
func (c *resultCache[T]) deleteAtLocked(i int) {
	delete(c.idx, c.list[i].topic)
	last := len(c.list) - 1
	if i < last {
		c.list[i] = c.list[last]
		c.idx[c.list[i].topic] = i
	}
	c.list[last] = cachedResult[T]{}
	c.list = c.list[:last]
}

// node is one trie level. A node reached by the tokens of a pattern holds that
// pattern's entries in subs.
type node[T comparable] struct {
	lit  map[string]*node[T] // children by literal token
	star *node[T]            // child for "*"
	full *node[T]            // child for ">": a leaf, only subs is used
	subs entries[T]
}

func (n *node[T]) empty() bool {
	return len(n.lit) == 0 && n.star == nil && n.full == nil && len(n.subs.list) == 0
}

// entries is the set of v subscribed with one pattern. Most patterns have one or a
// few subscribers, so it is a plain slice; a large fan-out gets an index so that Add
// and Remove stay O(1).
type entries[T comparable] struct {
	list []T
	idx  map[T]int // position in list, built once list outgrows entriesIndexMin
}

const entriesIndexMin = 16

func (e *entries[T]) find(v T) int {
	if e.idx != nil {
		if i, ok := e.idx[v]; ok {
			return i
		}
		return -1
	}
	for i, x := range e.list {
		if x == v {
			return i
		}
	}
	return -1
}

func (e *entries[T]) add(v T) bool {
	if e.find(v) >= 0 {
		return false
	}
	e.list = append(e.list, v)
	if e.idx != nil {
		e.idx[v] = len(e.list) - 1
	} else if len(e.list) > entriesIndexMin {
		e.idx = make(map[T]int, len(e.list))
		for i, x := range e.list {
			e.idx[x] = i
		}
	}
	return true
}

func (e *entries[T]) remove(v T) bool {
	i := e.find(v)
	if i < 0 {
		return false
	}
	last := len(e.list) - 1
	e.list[i] = e.list[last]
	var zero T
	e.list[last] = zero // let a pointer handle be collected
	e.list = e.list[:last]
	if e.idx != nil {
		delete(e.idx, v)
		if i < last {
			e.idx[e.list[i]] = i
		}
		if len(e.list) == 0 {
			e.idx = nil
		}
	}
	return true
}

// NewTable returns an empty interest table.
func NewTable[T comparable]() *Table[T] {
	t := &Table[T]{}
	t.cache.idx = make(map[string]int)
	t.cache.list = make([]cachedResult[T], 0, cacheMax)
	return t
}

// Add subscribes v with pattern. It returns the pattern's validation error, if any.
// Adding an entry that is already present is a no-op: entries form a set.
func (t *Table[T]) Add(pattern string, v T) error {
	if err := ValidatePattern(pattern); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n := &t.root
	for tok, rest, more := strings.Cut(pattern, "."); ; tok, rest, more = strings.Cut(rest, ".") {
		var next **node[T]
		switch tok {
		case "*":
			next = &n.star
		case ">":
			next = &n.full
		default:
			if n.lit == nil {
				n.lit = make(map[string]*node[T])
			}
			c := n.lit[tok]
			if c == nil {
				c = &node[T]{}
				n.lit[tok] = c
			}
			next = &c
		}
		if *next == nil {
			*next = &node[T]{}
		}
		n = *next
		if !more {
			break
		}
	}
	if n.subs.add(v) {
		t.n++
		t.invalidateLocked(pattern)
	}
	return nil
}

// Remove unsubscribes v from pattern and reports whether the entry was present.
func (t *Table[T]) Remove(pattern string, v T) bool {
	if f, _ := scan(pattern, true); f != faultNone {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// Record the path so that nodes left empty can be pruned bottom-up.
	var path [MaxTokens + 1]*node[T]
	var toks [MaxTokens]string
	depth := 0
	path[0] = &t.root
	n := &t.root
	for tok, rest, more := strings.Cut(pattern, "."); ; tok, rest, more = strings.Cut(rest, ".") {
		switch tok {
		case "*":
			n = n.star
		case ">":
			n = n.full
		default:
			n = n.lit[tok]
		}
		if n == nil {
			return false
		}
		toks[depth] = tok
		depth++
		path[depth] = n
		if !more {
			break
		}
	}
	if !n.subs.remove(v) {
		return false
	}
	t.n--
	for d := depth; d > 0 && path[d].empty(); d-- {
		parent := path[d-1]
		switch toks[d-1] {
		case "*":
			parent.star = nil
		case ">":
			parent.full = nil
		default:
			delete(parent.lit, toks[d-1])
			if len(parent.lit) == 0 {
				parent.lit = nil
			}
		}
	}
	t.invalidateLocked(pattern)
	return true
}

// Match returns every v whose pattern matches topic, once per matching (pattern, v)
// entry, in no particular order; nil if none matches or topic is not a valid topic.
// The slice may be shared with other callers: the caller must not modify it.
func (t *Table[T]) Match(topic string) []T {
	t.cache.RLock()
	r, ok := t.cache.getLocked(topic)
	t.cache.RUnlock()
	if ok {
		return r
	}
	if f, _ := scan(topic, false); f != faultNone {
		return nil
	}
	// Holding mu (read) until the result is cached keeps an Add or Remove from
	// slipping in between the walk and the insert and leaving a stale entry behind.
	t.mu.RLock()
	defer t.mu.RUnlock()
	r = t.root.match(topic, nil)
	t.cache.Lock()
	t.cache.putLocked(topic, r)
	t.cache.Unlock()
	return r
}

// matchUncached walks the trie without the cache; benchmarks use it to measure the
// walk alone.
func (t *Table[T]) matchUncached(topic string) []T {
	if f, _ := scan(topic, false); f != faultNone {
		return nil
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.root.match(topic, nil)
}

// Len returns the number of (pattern, v) entries.
func (t *Table[T]) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.n
}

// match appends the entries of every pattern under n that matches topic (which has
// at least one token left). Each trie node is visited at most once per topic, so a
// lookup costs at most the size of the trie, never the product of its branches.
func (n *node[T]) match(topic string, out []T) []T {
	tok, rest, more := strings.Cut(topic, ".")
	if n.full != nil {
		out = append(out, n.full.subs.list...)
	}
	if c := n.lit[tok]; c != nil {
		out = c.matchRest(rest, more, out)
	}
	if n.star != nil {
		out = n.star.matchRest(rest, more, out)
	}
	return out
}

func (n *node[T]) matchRest(rest string, more bool, out []T) []T {
	if !more {
		return append(out, n.subs.list...)
	}
	return n.match(rest, out)
}

// invalidateLocked drops the cached results that a change to pattern can affect.
// A literal pattern affects one topic; a wildcard scans the cache (at most cacheMax
// entries). Called with mu held for writing.
func (t *Table[T]) invalidateLocked(pattern string) {
	t.cache.Lock()
	defer t.cache.Unlock()
	if IsLiteral(pattern) {
		if i, ok := t.cache.idx[pattern]; ok {
			t.cache.deleteAtLocked(i)
		}
		return
	}
	// Cached topics that do not start with the pattern's literal prefix cannot match;
	// checking that first keeps the scan cheap for the usual "tenant.*.x" shapes.
	prefix := pattern[:strings.IndexAny(pattern, "*>")]
	// Backwards, so that deleteAtLocked only moves entries already checked.
	for i := len(t.cache.list) - 1; i >= 0; i-- {
		if topic := t.cache.list[i].topic; strings.HasPrefix(topic, prefix) && matchValid(pattern, topic) {
			t.cache.deleteAtLocked(i)
		}
	}
}
