package wal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
)

// A Sweep reads many topics with one iterator: every record once and in order, in batches
// of both limits, topics visited in ID order and out of it, records appended after its
// iterator was opened (it opens a new one), a GAP's error after a purge, a deleted topic's
// error; and its listing (TopicsWhile) and the advances OnAdvance reports meet exactly.
func TestSweepReads(t *testing.T) {
	l, _ := newTestLog(t, Options{})
	type adv struct {
		topic    string
		from, to uint64
	}
	var advs []adv
	var listed []ListedTopic
	const topics = 50
	for i := range topics {
		mustAppend(t, l, fmt.Sprintf("sw.%d", i), 0, 1+i%4)
	}
	listed = l.TopicsWhile(func() {
		l.OnAdvance(func(topic string, id uint32, from, to uint64) { advs = append(advs, adv{topic, from, to}) })
	})
	if len(listed) != topics {
		t.Fatalf("listed %d topics, want %d", len(listed), topics)
	}
	byName := map[string]ListedTopic{}
	for _, lt := range listed {
		if first, next, _ := l.Bounds(lt.Name); lt.ID != lt.Instance.ID() || lt.First != first || lt.Next != next {
			t.Fatalf("listed %+v, bounds %d %d", lt, first, next)
		}
		byName[lt.Name] = lt
	}
	sw := l.NewSweep()
	defer sw.Release()
	read := func(name string, from uint64, maxRecords, maxBytes int) (int, bool, error) {
		return sw.ReadFunc(byName[name].Instance, from, maxRecords, maxBytes, func(r *Record) error {
			if want := testPayload(name, int(r.Offset)); !bytes.Equal(r.Payload, want) {
				t.Fatalf("%s at %d: payload %q, want %q", name, r.Offset, r.Payload, want)
			}
			if r.Offset != from {
				t.Fatalf("%s: offset %d, want %d", name, r.Offset, from)
			}
			from++
			return nil
		})
	}
	readAll := func(order []string) {
		t.Helper()
		for _, name := range order {
			for next := uint64(0); ; {
				n, more, err := read(name, next, 1+int(next)%2, 40)
				if err != nil {
					t.Fatalf("%s from %d: %v", name, next, err)
				}
				next += uint64(n)
				if !more {
					if _, head, _ := l.Bounds(name); next != head {
						t.Fatalf("%s: read to %d, head %d", name, next, head)
					}
					break
				}
			}
		}
	}
	var inOrder, reversed []string
	for i := range topics {
		inOrder = append(inOrder, fmt.Sprintf("sw.%d", i))
		reversed = append(reversed, fmt.Sprintf("sw.%d", topics-1-i))
	}
	readAll(inOrder)
	opens := sw.Opens()
	readAll(inOrder[:10])
	readAll(reversed)
	if sw.Opens() != opens {
		t.Fatalf("reads of what the iterator holds opened %d iterators", sw.Opens()-opens)
	}

	// Appended after the iterator opened: found with a new one.
	mustAppend(t, l, "sw.3", int(byName["sw.3"].Next), 5)
	if len(advs) != 1 || advs[0] != (adv{"sw.3", byName["sw.3"].Next, byName["sw.3"].Next + 5}) {
		t.Fatalf("advances after the listing: %+v", advs)
	}
	if n, more, err := read("sw.3", byName["sw.3"].Next, 0, 0); err != nil || n != 5 || more {
		t.Fatalf("read of the new records: %d %v %v", n, more, err)
	}
	if sw.Opens() != opens+1 {
		t.Fatalf("iterators opened: %d, want %d", sw.Opens(), opens+1)
	}

	ctx := context.Background()
	if _, err := l.PurgeTopic(ctx, "sw.5"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := read("sw.5", 0, 0, 0); !errors.As(err, new(*OffsetOutOfRangeError)) {
		t.Fatalf("read below a purge: %v, want *OffsetOutOfRangeError", err)
	}
	if _, err := l.DeleteTopic(ctx, "sw.6"); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, "sw.6", 0, 1) // a new log of that name
	if _, _, err := read("sw.6", 0, 0, 0); !errors.Is(err, ErrTopicDeleted) {
		t.Fatalf("read of a deleted instance: %v, want ErrTopicDeleted", err)
	}
	if _, _, err := sw.ReadFunc(Instance{}, 0, 0, 0, func(*Record) error { return nil }); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("read of the zero Instance: %v, want ErrUnknownTopic", err)
	}
}
