package wal

import (
	"context"
	"fmt"
	"slices"
	"testing"
)

// TestNewTopicsSince: the journal of created topics names each creation once, in order,
// from any cursor; a topic deleted and created again is created again; after much churn
// a cursor older than the journal is told to list again.
func TestNewTopicsSince(t *testing.T) {
	l, _ := newTestLog(t, Options{})
	ctx := context.Background()
	appendTo := func(topic string) {
		t.Helper()
		if res := l.Append(ctx, AppendRequest{Topic: topic, Records: []Record{{Payload: []byte("x")}}}); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	appendTo("a")
	names, cursor := l.TopicsCursor()
	if !slices.Equal(names, []string{"a"}) {
		t.Fatalf("TopicsCursor: %v", names)
	}
	appendTo("a") // not a creation
	appendTo("b")
	appendTo("c")
	got, next, ok := l.NewTopicsSince(cursor)
	if !ok || !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("NewTopicsSince(%d) = %v, %v, want [b c]", cursor, got, ok)
	}
	if got, again, ok := l.NewTopicsSince(next); !ok || len(got) != 0 || again != next {
		t.Fatalf("NewTopicsSince(%d) at the end = %v, %d, %v", next, got, again, ok)
	}
	if _, err := l.DeleteTopic(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	appendTo("b")
	if got, _, ok := l.NewTopicsSince(next); !ok || !slices.Equal(got, []string{"b"}) {
		t.Fatalf("after b was deleted and created again: %v, %v", got, ok)
	}
	// Churn: one topic created and deleted over and over trims the journal.
	for i := range 3000 {
		name := fmt.Sprintf("churn.%d", i)
		appendTo(name)
		if _, err := l.DeleteTopic(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, ok := l.NewTopicsSince(cursor); ok {
		t.Fatal("a cursor from before 3000 creations of a churning log was still served")
	}
	l.mu.RLock()
	kept := len(l.mu.created)
	l.mu.RUnlock()
	if kept > 2*3+1024 {
		t.Fatalf("the journal keeps %d names for 3 topics", kept)
	}
}
