package wal

import (
	"errors"
	"testing"
)

// A Scanner checked against an Instance (one look-up for many Scanners, as a fanout does)
// sees what Check sees: bound to the topic as it was, it reports a delete, and a new topic
// of the same name is another log.
func TestScannerCheckAt(t *testing.T) {
	l, _ := newTestLog(t, Options{})
	appendOne := func(topic string) {
		t.Helper()
		if res := l.Append(t.Context(), AppendRequest{Topic: topic, Records: []Record{{Payload: []byte("x")}}}); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	unbound := l.NewScanner("a")
	if err := unbound.CheckAt(l.Instance("a")); err != nil {
		t.Fatalf("before the topic exists: %v", err)
	}
	appendOne("a")
	sc, other := l.NewScanner("a"), l.NewScanner("a")
	first := l.Instance("a")
	for _, s := range []*Scanner{sc, other, unbound} {
		if err := s.CheckAt(first); err != nil {
			t.Fatalf("binding: %v", err)
		}
		if err := s.CheckAt(l.Instance("a")); err != nil {
			t.Fatalf("the same topic again: %v", err)
		}
	}
	if _, err := l.DeleteTopic(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	var gone *TopicDeletedError
	if err := sc.CheckAt(l.Instance("a")); !errors.As(err, &gone) {
		t.Fatalf("after the delete: %v, want a TopicDeletedError", err)
	}
	appendOne("a") // a new topic of the same name
	if err := other.CheckAt(l.Instance("a")); !errors.As(err, &gone) {
		t.Fatalf("after the topic was made again: %v, want a TopicDeletedError", err)
	}
	if err, want := other.CheckAt(l.Instance("a")), other.Check(); (err == nil) != (want == nil) {
		t.Fatalf("CheckAt %v, Check %v", err, want)
	}
	if err := l.NewScanner("a").CheckAt(l.Instance("a")); err != nil {
		t.Fatalf("a new Scanner of the new topic: %v", err)
	}
}
