package node

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
)

// groupPublish publishes count records to topic (payload "i" for i = from...), with a key
// header from key when not nil.
func groupPublish(t *testing.T, c *client.Conn, topic string, from, count int, key func(int) string) {
	t.Helper()
	// Pipelined (one Conn's publishes are appended in call order): one synced publish after
	// the other took over 20 s for 2,000 records on a loaded machine under -race.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	futures := make([]*client.Future, 0, count)
	for i := from; i < from+count; i++ {
		m := client.Message{Topic: topic, Payload: []byte(strconv.Itoa(i))}
		if key != nil {
			m.Headers = []client.Header{{Key: client.KeyHeader, Value: []byte(key(i))}}
		}
		f, err := c.PublishAsync(ctx, m)
		if err != nil {
			t.Fatalf("publish %d to %s: %v", i, topic, err)
		}
		futures = append(futures, f)
	}
	for i, f := range futures {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatalf("publish %d to %s: %v", from+i, topic, err)
		}
	}
}

// deliveries records which member got which record, and fails on a record delivered twice.
type deliveries struct {
	mu    sync.Mutex
	by    map[string]int // "topic@offset" -> member
	count map[int]int    // member -> records
	dup   []string
	all   chan struct{} // closed when want records arrived
	want  int
}

func newDeliveries(want int) *deliveries {
	return &deliveries{by: map[string]int{}, count: map[int]int{}, all: make(chan struct{}), want: want}
}

func (d *deliveries) add(member int, r client.Record) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := fmt.Sprintf("%s@%d", r.Topic, r.Offset)
	if prev, ok := d.by[k]; ok {
		d.dup = append(d.dup, fmt.Sprintf("%s to %d and %d", k, prev, member))
		return
	}
	d.by[k] = member
	d.count[member]++
	if len(d.by) == d.want {
		close(d.all)
	}
}

// consume reads sub until ctx ends, acking each record after recording it.
func consume(ctx context.Context, t *testing.T, sub *client.Subscription, member int, d *deliveries) {
	for {
		r, err := sub.Next(ctx)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, client.ErrClosed) {
				t.Errorf("member %d: %v", member, err)
			}
			return
		}
		d.add(member, r)
		if err := sub.Ack(r); err != nil && ctx.Err() == nil {
			t.Errorf("member %d: ack: %v", member, err)
			return
		}
	}
}

func waitAll(t *testing.T, d *deliveries, timeout time.Duration) {
	t.Helper()
	select {
	case <-d.all:
	case <-time.After(timeout):
		d.mu.Lock()
		defer d.mu.Unlock()
		t.Fatalf("%d of %d records delivered within %v", len(d.by), d.want, timeout)
	}
}

func joinGroup(t *testing.T, c *client.Conn, pattern string, opts client.SubscribeOptions) *client.Subscription {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub, err := c.Subscribe(ctx, pattern, opts)
	if err != nil {
		t.Fatalf("join group %q: %v", opts.Group, err)
	}
	t.Cleanup(func() { sub.Close() })
	return sub
}

// TestGroupSplitsTopic: two and ten members of a group split a topic: every record goes to
// exactly one member while none fails, and (with two) both get some.
func TestGroupSplitsTopic(t *testing.T) {
	for _, members := range []int{2, 10} {
		t.Run(strconv.Itoa(members), func(t *testing.T) {
			n := newTestNode(t)
			c := dialNode(t, n, client.Options{})
			const total = 2000
			d := newDeliveries(total)
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for i := range members {
				mc := dialNode(t, n, client.Options{})
				sub := joinGroup(t, mc, "work", client.SubscribeOptions{Group: "g"})
				wg.Add(1)
				go func() { defer wg.Done(); consume(ctx, t, sub, i, d) }()
			}
			groupPublish(t, c, "work", 0, total, nil)
			waitAll(t, d, 30*time.Second)
			cancel()
			wg.Wait()
			if len(d.dup) > 0 {
				t.Fatalf("delivered to two members: %v", d.dup[:min(5, len(d.dup))])
			}
			if members == 2 && (d.count[0] == 0 || d.count[1] == 0) {
				t.Fatalf("one member got nothing: %v", d.count)
			}
			t.Logf("records per member: %v", d.count)
		})
	}
}

// TestGroupMemberEndsLosesNothing: a member that acknowledges only some of its records and
// ends: the others reach the next member; nothing acknowledged comes again.
func TestGroupMemberEndsLosesNothing(t *testing.T) {
	n := newTestNode(t)
	c := dialNode(t, n, client.Options{})
	groupPublish(t, c, "work", 0, 300, nil)
	a := joinGroup(t, dialNode(t, n, client.Options{}), "work", client.SubscribeOptions{Group: "g"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	acked := map[uint64]bool{}
	for range 100 {
		r, err := a.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Offset%2 == 0 {
			acked[r.Offset] = true
			if err := a.Ack(r); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b := joinGroup(t, dialNode(t, n, client.Options{}), "work", client.SubscribeOptions{Group: "g"})
	got := map[uint64]bool{}
	for len(got)+len(acked) < 300 {
		r, err := b.Next(ctx)
		if err != nil {
			t.Fatalf("after %d records: %v", len(got), err)
		}
		if acked[r.Offset] || got[r.Offset] {
			t.Fatalf("offset %d delivered again after its ACK", r.Offset)
		}
		got[r.Offset] = true
		b.Ack(r)
	}
}

// TestGroupDeadLetter: a record given back (NAK) and left past its ack-wait reaches
// max-deliver and goes to the dead-letter topic with headers saying why and from where; the
// group then moves on.
func TestGroupDeadLetter(t *testing.T) {
	n := newTestNode(t)
	c := dialNode(t, n, client.Options{})
	groupPublish(t, c, "work", 0, 2, nil)
	sub := joinGroup(t, dialNode(t, n, client.Options{}), "work", client.SubscribeOptions{Group: "g", AckWait: 200 * time.Millisecond, MaxDeliver: 3, DeadLetter: "work-dlq"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	seen := 0
	for seen < 3 { // offset 0: NAK, then an ack-wait expiry, then the third delivery is the last
		r, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Offset == 1 {
			sub.Ack(r)
			continue
		}
		seen++
		if seen == 1 {
			if err := sub.Nak(r); err != nil {
				t.Fatal(err)
			}
		}
	}
	dlq, err := c.Subscribe(ctx, "work-dlq", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close()
	r, err := dlq.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h := map[string]string{}
	for _, x := range r.Headers {
		h[x.Key] = string(x.Value)
	}
	if string(r.Payload) != "0" || h[client.DeadLetterTopicHeader] != "work" || h[client.DeadLetterOffsetHeader] != "0" ||
		h[client.DeadLetterGroupHeader] != "g" || h[client.DeadLetterDeliveriesHeader] != "3" || h[client.DeadLetterMemberHeader] == "" ||
		h[client.DeadLetterReasonHeader] == "" {
		t.Fatalf("dead-letter record %q headers %v", r.Payload, h)
	}
	t.Logf("dead-letter headers: %v", h)
	// The group moved on: the next record published is delivered, and offset 0 is not.
	groupPublish(t, c, "work", 2, 1, nil)
	for {
		r, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Offset == 0 {
			t.Fatalf("offset 0 delivered again after it was dead-lettered")
		}
		if r.Offset == 2 {
			break
		}
	}
}

// TestGroupSettingsConflict: a member asking for other settings is refused naming them.
func TestGroupSettingsConflict(t *testing.T) {
	n := newTestNode(t)
	c := dialNode(t, n, client.Options{})
	joinGroup(t, c, "work", client.SubscribeOptions{Group: "g", MaxDeliver: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Subscribe(ctx, "work", client.SubscribeOptions{Group: "g", MaxDeliver: 4})
	var e *client.Error
	if !errors.As(err, &e) || e.Code != client.CodeConflict || !containsAll(err.Error(), "max-deliver", "3", "4") {
		t.Fatalf("conflicting member: %v", err)
	}
	if _, err := c.Subscribe(ctx, "other", client.SubscribeOptions{Group: "g"}); !errors.As(err, &e) || e.Code != client.CodeConflict {
		t.Fatalf("member with another pattern: %v", err)
	}
	// Zero settings take the group's.
	joinGroup(t, c, "work", client.SubscribeOptions{Group: "g"})
}
