package wal

import (
	"slices"
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
