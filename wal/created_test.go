package wal

import (
	"slices"
	"sync"
	"testing"
)

// CreatedSince names the topics that became durable after a mark, in creation order, and
// after a reopen the recovered ones; appends to existing topics name nothing.
func TestCreatedSince(t *testing.T) {
	l, dir := newTestLog(t, Options{})
	if names, mark := l.CreatedSince(-1); names != nil || mark != 0 {
		t.Fatalf("empty log: %v %d", names, mark)
	}
	mustAppend(t, l, "a", 0, 1)
	mustAppend(t, l, "b", 0, 1)
	names, mark := l.CreatedSince(0)
	if !slices.Equal(names, []string{"a", "b"}) || mark != 2 {
		t.Fatalf("after a, b: %v %d", names, mark)
	}
	mustAppend(t, l, "a", 1, 1) // an append to a topic that exists creates nothing
	mustAppend(t, l, "c", 0, 1)
	if names, next := l.CreatedSince(mark); !slices.Equal(names, []string{"c"}) || next != 3 {
		t.Fatalf("after c: %v %d", names, next)
	}
	if names, next := l.CreatedSince(3); names != nil || next != 3 {
		t.Fatalf("nothing new: %v %d", names, next)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2 := openTestLog(t, dir, Options{})
	names, mark = l2.CreatedSince(0)
	slices.Sort(names)
	if !slices.Equal(names, []string{"a", "b", "c"}) || mark != 3 {
		t.Fatalf("recovered: %v %d", names, mark)
	}
}

// WatchAdvances calls every registered function once per advance of any topic, until
// cancelled.
func TestWatchAdvances(t *testing.T) {
	l, _ := newTestLog(t, Options{})
	var mu sync.Mutex
	var one, two []string
	cancel1 := l.WatchAdvances(func(topic string) { mu.Lock(); one = append(one, topic); mu.Unlock() })
	cancel2 := l.WatchAdvances(func(topic string) { mu.Lock(); two = append(two, topic); mu.Unlock() })
	mustAppend(t, l, "a", 0, 2)
	mustAppend(t, l, "b", 0, 1)
	cancel1()
	cancel1()
	mustAppend(t, l, "c", 0, 1)
	cancel2()
	mustAppend(t, l, "d", 0, 1)
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(one, []string{"a", "b"}) || !slices.Equal(two, []string{"a", "b", "c"}) {
		t.Fatalf("first saw %v, second %v", one, two)
	}
}
