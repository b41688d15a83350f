package wal

import (
	"context"
	"fmt"
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
	cancel1 := l.WatchAdvances(func(topic string, _ bool) { mu.Lock(); one = append(one, topic); mu.Unlock() })
	cancel2 := l.WatchAdvances(func(topic string, _ bool) { mu.Lock(); two = append(two, topic); mu.Unlock() })
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

// Topics created and deleted over and over do not grow the creation journal without bound;
// a mark from before the names it dropped is answered with every topic there is.
func TestCreatedSinceChurn(t *testing.T) {
	l, _ := newTestLog(t, Options{})
	mustAppend(t, l, "kept", 0, 1)
	_, mark := l.CreatedSince(0)
	for i := range 1200 {
		name := fmt.Sprintf("churn.%d", i)
		mustAppend(t, l, name, 0, 1)
		if _, err := l.DeleteTopic(context.Background(), name); err != nil {
			t.Fatal(err)
		}
	}
	l.mu.RLock()
	kept := len(l.mu.created)
	l.mu.RUnlock()
	if kept > 2*1+1024+1 {
		t.Fatalf("the journal keeps %d names for 1 topic", kept)
	}
	names, next := l.CreatedSince(mark)
	if !slices.Equal(names, []string{"kept"}) || next != 1201 {
		t.Fatalf("a mark from before the dropped names: %v, %d; want every topic and mark 1201", names, next)
	}
	mustAppend(t, l, "new", 0, 1)
	if names, _ := l.CreatedSince(next); !slices.Equal(names, []string{"new"}) {
		t.Fatalf("after the churn: %v", names)
	}
}

// WatchAdvances tells an advance that made records of this region durable from one of
// mirrored records only (what a catalog stream reports to the regions it serves).
func TestWatchAdvancesLocal(t *testing.T) {
	l, _ := newTestLog(t, Options{})
	var mu sync.Mutex
	var got []string
	defer l.WatchAdvances(func(topic string, local bool) {
		mu.Lock()
		got = append(got, fmt.Sprintf("%s:%v", topic, local))
		mu.Unlock()
	})()
	mirrored := func(topic string, off uint64) {
		t.Helper()
		res := l.Append(context.Background(), AppendRequest{Topic: topic, Records: []Record{{OriginRegion: "us", OriginOffset: off, Payload: []byte("m")}},
			Position: &Position{Name: "mirror/us", Topic: topic, Value: off}})
		if res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	mustAppend(t, l, "a", 0, 1) // local
	mirrored("a", 0)
	mirrored("b", 0) // a topic created by a mirror
	mustAppend(t, l, "b", 1, 1)
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"a:true", "a:false", "b:false", "b:true"}; !slices.Equal(got, want) {
		t.Fatalf("advances %v, want %v", got, want)
	}
}
