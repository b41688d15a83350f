package routing

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

func sorted(vs []int) []int {
	out := slices.Clone(vs)
	slices.Sort(out)
	return out
}

func checkMatch(t *testing.T, tab *Table[int], topic string, want ...int) {
	t.Helper()
	got := sorted(tab.Match(topic))
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("Match(%q) = %v, want %v", topic, got, want)
	}
}

func TestTableBasic(t *testing.T) {
	tab := NewTable[int]()
	for i, p := range []string{"a.b", "a.*", "a.>", ">", "*.b", "a.b.c"} {
		if err := tab.Add(p, i); err != nil {
			t.Fatalf("Add(%q): %v", p, err)
		}
	}
	if err := tab.Add("a.b", 0); err != nil { // already present: a no-op
		t.Fatalf("Add duplicate: %v", err)
	}
	if err := tab.Add("a", 1); err != nil { // same v, another pattern
		t.Fatal(err)
	}
	if n := tab.Len(); n != 7 {
		t.Fatalf("Len = %d, want 7", n)
	}
	checkMatch(t, tab, "a.b", 0, 1, 2, 3, 4)
	checkMatch(t, tab, "a.b.c", 2, 3, 5)
	checkMatch(t, tab, "a", 1, 3)
	checkMatch(t, tab, "x.y", 3)
	checkMatch(t, tab, "x", 3)
	if got := tab.Match("a.*"); got != nil {
		t.Fatalf("Match of an invalid topic = %v, want nil", got)
	}

	err := tab.Add("a.>.b", 9)
	if !errors.Is(err, ErrInvalidPattern) {
		t.Fatalf("Add(invalid) = %v, want ErrInvalidPattern", err)
	}
	if tab.Remove("a.>.b", 9) || tab.Remove("a.b", 99) || tab.Remove("q.r", 0) || tab.Remove("a.b.c.d", 5) {
		t.Fatal("Remove of an absent entry reported true")
	}
	if !tab.Remove("a.*", 1) || tab.Remove("a.*", 1) {
		t.Fatal("Remove(a.*, 1) not exactly once")
	}
	checkMatch(t, tab, "a.b", 0, 2, 3, 4)
	checkMatch(t, tab, "a", 1, 3)
	if n := tab.Len(); n != 6 {
		t.Fatalf("Len = %d, want 6", n)
	}
}

func TestTablePrunesEmptyNodes(t *testing.T) {
	tab := NewTable[int]()
	patterns := []string{"a.b.c", "a.*.c", "a.>", ">", "*", "a.b", "x.y.z.>"}
	for i, p := range patterns {
		if err := tab.Add(p, i); err != nil {
			t.Fatal(err)
		}
	}
	for i, p := range patterns {
		if !tab.Remove(p, i) {
			t.Fatalf("Remove(%q) = false", p)
		}
	}
	if !tab.root.empty() || tab.Len() != 0 {
		t.Fatalf("table not empty after removing everything: %+v len %d", tab.root, tab.Len())
	}
	checkMatch(t, tab, "a.b.c")
}

func TestTableCacheInvalidation(t *testing.T) {
	tab := NewTable[int]()
	checkMatch(t, tab, "a.b") // caches an empty result
	if err := tab.Add("a.b", 1); err != nil {
		t.Fatal(err)
	}
	checkMatch(t, tab, "a.b", 1)
	checkMatch(t, tab, "c.d")
	if err := tab.Add("*.b", 2); err != nil {
		t.Fatal(err)
	}
	checkMatch(t, tab, "a.b", 1, 2)
	// A wildcard that does not match a cached topic leaves its entry alone.
	if err := tab.Add("x.>", 3); err != nil {
		t.Fatal(err)
	}
	tab.cache.RLock()
	_, cached := tab.cache.idx["a.b"]
	_, cachedCD := tab.cache.idx["c.d"]
	tab.cache.RUnlock()
	if !cached || !cachedCD {
		t.Fatalf("unrelated Add dropped cached results (a.b %v, c.d %v)", cached, cachedCD)
	}
	if err := tab.Add(">", 4); err != nil {
		t.Fatal(err)
	}
	checkMatch(t, tab, "c.d", 4)
	tab.Remove("a.b", 1)
	checkMatch(t, tab, "a.b", 2, 4)
	tab.Remove(">", 4)
	checkMatch(t, tab, "a.b", 2)
	checkMatch(t, tab, "c.d")
}

func TestTableCacheBounded(t *testing.T) {
	tab := NewTable[int]()
	if err := tab.Add("t.>", 1); err != nil {
		t.Fatal(err)
	}
	defer checkCache(t, tab)
	for i := range 3 * cacheMax {
		checkMatch(t, tab, fmt.Sprintf("t.%d", i), 1)
		if i%97 == 0 {
			checkCache(t, tab)
		}
	}
}

// checkCache checks the cache's bound, that its index agrees with its list, and
// that every cached result is what the trie says now.
func checkCache(t *testing.T, tab *Table[int]) {
	t.Helper()
	tab.cache.RLock()
	defer tab.cache.RUnlock()
	if n := len(tab.cache.list); n > cacheMax || n != len(tab.cache.idx) {
		t.Fatalf("cache holds %d entries, index %d, bound %d", n, len(tab.cache.idx), cacheMax)
	}
	for i, e := range tab.cache.list {
		if j, ok := tab.cache.idx[e.topic]; !ok || j != i {
			t.Fatalf("cache index of %q = %d, %v; entry is at %d", e.topic, j, ok, i)
		}
		if got, want := sorted(e.r), sorted(tab.root.match(e.topic, nil)); !slices.Equal(got, want) {
			t.Fatalf("stale cache entry %q: %v, trie says %v", e.topic, got, want)
		}
	}
}

// Two lookups of one topic that miss at the same time both insert their result.
func TestTableCacheConcurrentMiss(t *testing.T) {
	tab := NewTable[int]()
	if err := tab.Add("a.*", 1); err != nil {
		t.Fatal(err)
	}
	r := tab.root.match("a.b", nil)
	tab.cache.Lock()
	tab.cache.putLocked("a.b", r)
	tab.cache.putLocked("a.b", r)
	tab.cache.Unlock()
	checkCache(t, tab)
	if err := tab.Add("a.b", 2); err != nil {
		t.Fatal(err)
	}
	checkMatch(t, tab, "a.b", 1, 2)
	checkCache(t, tab)
}

func TestTableLargeFanout(t *testing.T) {
	tab := NewTable[int]()
	const n = 200
	for i := range n {
		if err := tab.Add("a.*", i); err != nil {
			t.Fatal(err)
		}
		if err := tab.Add("a.*", i); err != nil { // duplicate, also with the index built
			t.Fatal(err)
		}
	}
	var want []int
	for i := range n {
		if i%3 == 0 {
			if !tab.Remove("a.*", i) {
				t.Fatalf("Remove(a.*, %d) = false", i)
			}
		} else {
			want = append(want, i)
		}
	}
	checkMatch(t, tab, "a.b", want...)
	for _, v := range want {
		tab.Remove("a.*", v)
	}
	if tab.Len() != 0 || !tab.root.empty() {
		t.Fatalf("Len = %d after removing all", tab.Len())
	}
}

// randSubject draws a topic or pattern over a three-letter alphabet, so that random
// patterns and topics actually match each other.
func randSubject(r *rand.Rand, pattern bool) string {
	n := 1 + r.IntN(4)
	b := make([]byte, 0, 2*n)
	for i := range n {
		if i > 0 {
			b = append(b, '.')
		}
		k := r.IntN(4)
		switch {
		case pattern && k == 3 && i == n-1 && r.IntN(2) == 0:
			b = append(b, '>')
		case pattern && k == 3:
			b = append(b, '*')
		default:
			b = append(b, "abc"[k%3])
		}
	}
	return string(b)
}

func TestMatchProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	matched := 0
	for range 50000 {
		p, tp := randSubject(r, true), randSubject(r, false)
		got, want := Match(p, tp), refMatch(p, tp)
		if got != want {
			t.Fatalf("Match(%q, %q) = %v, reference says %v", p, tp, got, want)
		}
		if got {
			matched++
		}
	}
	if matched < 1000 {
		t.Fatalf("only %d of 50000 random pairs matched: the property test is too weak", matched)
	}
}

type entry struct {
	pattern string
	v       int
}

// TestTableProperty interleaves random Add, Remove and Match on a Table and on a
// brute-force model using the reference matcher. Matching between changes keeps
// the cache populated, so stale cache entries would show up as differences.
func TestTableProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	tab := NewTable[int]()
	model := map[entry]bool{}
	var live []entry // model's keys, to remove present entries most of the time
	multi := 0       // lookups that matched more than one entry
	for range 5000 {
		e := entry{randSubject(r, true), r.IntN(4)}
		add := r.IntN(2) == 0 && len(live) < 150
		if len(live) > 0 && (!add && r.IntN(4) > 0 || add && r.IntN(8) == 0) {
			e = live[r.IntN(len(live))]
		}
		if add {
			if err := tab.Add(e.pattern, e.v); err != nil {
				t.Fatal(err)
			}
			if !model[e] {
				live = append(live, e)
			}
			model[e] = true
		} else {
			if got, want := tab.Remove(e.pattern, e.v), model[e]; got != want {
				t.Fatalf("Remove(%q, %d) = %v, want %v", e.pattern, e.v, got, want)
			}
			if model[e] {
				i := slices.Index(live, e)
				live[i] = live[len(live)-1]
				live = live[:len(live)-1]
			}
			delete(model, e)
		}
		if tab.Len() != len(model) {
			t.Fatalf("Len = %d, model has %d", tab.Len(), len(model))
		}
		checkCache(t, tab)
		for range 2 {
			topic := randSubject(r, false)
			var want []int
			for _, e := range live {
				if refMatchValid(e.pattern, topic) {
					want = append(want, e.v)
				}
			}
			checkMatch(t, tab, topic, want...)
			if len(want) > 1 {
				multi++
			}
		}
	}
	if len(live) < 20 || multi < 2000 {
		t.Fatalf("model ended with %d entries, %d lookups matched several: too weak", len(live), multi)
	}
}

// TestTableConcurrent runs matchers against writers; with -race it checks the
// locking, and afterwards that no stale result survived in the cache.
func TestTableConcurrent(t *testing.T) {
	tab := NewTable[int]()
	topics := []string{"a.b", "a.c", "b.c", "a.b.c", "c"}
	patterns := []string{"a.*", "a.>", "*.c", ">", "a.b", "c", "*"}
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for range 3000 {
				p := patterns[r.IntN(len(patterns))]
				if r.IntN(2) == 0 {
					_ = tab.Add(p, w)
				} else {
					tab.Remove(p, w)
				}
			}
		})
	}
	for m := range 2 {
		wg.Go(func() {
			for i := range 6000 {
				for _, v := range tab.Match(topics[(i+m)%len(topics)]) {
					if v != 0 && v != 1 {
						t.Errorf("Match returned foreign value %d", v)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	for _, topic := range topics {
		got := sorted(tab.Match(topic))
		want := sorted(tab.matchUncached(topic))
		if !slices.Equal(got, want) {
			t.Fatalf("after concurrent changes Match(%q) = %v, trie says %v", topic, got, want)
		}
	}
	checkCache(t, tab)
}
