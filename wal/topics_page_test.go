package wal

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TopicsPage pages through the durable topics in name order, from any prefix, and agrees
// with Topics: every topic once, none that was deleted, the same figures.
func TestTopicsPage(t *testing.T) {
	l, _ := newTestLog(t, Options{})
	var want []string
	for i := range 50 {
		for _, p := range []string{"a", "b.x", "b.y", "b\xff"} {
			name := fmt.Sprintf("%s.t%03d", p, i)
			mustAppend(t, l, name, 0, 1+i%3)
			want = append(want, name)
		}
	}
	if _, err := l.DeleteTopic(context.Background(), "b.x.t007"); err != nil {
		t.Fatal(err)
	}
	want = slices.DeleteFunc(want, func(s string) bool { return s == "b.x.t007" })
	slices.Sort(want)
	all := func(prefix string, max int) []TopicInfo {
		var out []TopicInfo
		after, pages := "", 0
		for {
			page, more, err := l.TopicsPage(prefix, after, max)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if len(page) > max {
				t.Fatalf("prefix %q: a page of %d, max %d", prefix, len(page), max)
			}
			out = append(out, page...)
			if !more {
				break
			}
			after = page[len(page)-1].Name
		}
		if max == 7 && len(out) > 7 && pages < len(out)/7 {
			t.Fatalf("prefix %q: %d topics in %d pages of at most 7", prefix, len(out), pages)
		}
		return out
	}
	if got, full := all("", 7), l.Topics(); !slices.Equal(got, full) {
		t.Fatalf("paged listing differs from Topics: %d vs %d topics", len(got), len(full))
	}
	for _, prefix := range []string{"", "a", "b.", "b.y.t04", "b\xff", "c", "b.x.t007"} {
		for _, max := range []int{1, 7, 1000} {
			var names []string
			for _, ti := range all(prefix, max) {
				names = append(names, ti.Name)
			}
			var exp []string
			for _, n := range want {
				if strings.HasPrefix(n, prefix) {
					exp = append(exp, n)
				}
			}
			if !slices.Equal(names, exp) {
				t.Fatalf("prefix %q, pages of %d: got %d names %v..., want %d", prefix, max, len(names), names[:min(len(names), 3)], len(exp))
			}
		}
	}
	// A name after every name of the prefix: nothing, not an error.
	if page, more, err := l.TopicsPage("a", "a\xff", 10); err != nil || len(page) != 0 || more {
		t.Fatalf("after the prefix's names: %v %v %v", page, more, err)
	}
}
