package federation

import (
	"bytes"
	"context"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/wal"
)

// TestGroupPositions: a group state of the topic stored here with a vector is buffered as a
// GROUP_POSITION (its entries and Elsewhere both outstanding), once per change, never a state
// mirrored here or one without a vector; a GROUP_POSITION from a peer region is stored under
// its mirrored name, never replaced by one that is not newer. The names parse back.
func TestGroupPositions(t *testing.T) {
	l, err := wal.Open(t.TempDir(), wal.Options{RetentionInterval: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	if res := l.Append(ctx, wal.AppendRequest{Topic: "events", Records: []wal.Record{{Payload: []byte("x")}, {Payload: []byte("y")}}}); res.Err != nil {
		t.Fatal(res.Err)
	}
	f := &Federation{cfg: Config{Log: l}, log: slog.New(slog.DiscardHandler)}
	own := &wal.GroupState{Floor: 0, Next: 2, Entries: []wal.GroupEntry{{Offset: 1, Deliveries: 1, Origin: wal.OriginRef{Region: "us", Offset: 1}}},
		Vector: &wal.GroupVector{Through: map[string]uint64{"us": 1, "eu": 4}, Elsewhere: []wal.OriginRef{{Region: "eu", Offset: 3}}, Skipping: true}}
	if err := l.SetGroup(ctx, "tenant/a/workers", &wal.GroupSettings{Pattern: "events"}, map[string]*wal.GroupState{"events": own}); err != nil {
		t.Fatal(err)
	}
	if err := l.SetGroup(ctx, "plain", &wal.GroupSettings{Pattern: "events"}, map[string]*wal.GroupState{"events": {Floor: 2, Next: 2}}); err != nil {
		t.Fatal(err)
	}
	lk := &link{f: f, peer: Peer{Region: "eu"}, log: slog.New(slog.DiscardHandler)}
	m := &mirror{l: lk, topic: "events"}
	if err := m.storeGroupPosition(ctx, &wire.GroupPosition{Group: "tenant/a/workers", Time: 100,
		Through: []wire.OriginOffset{{Region: "eu", Offset: 9}}, Outstanding: []wire.OriginOffset{{Region: "eu", Offset: 2}}}); err != nil {
		t.Fatal(err)
	}

	var buf bytes.Buffer
	w := wire.NewWriter(&buf)
	c := &serveCursor{topic: "events"}
	if n := f.bufferGroupPositions(w, c); n != 1 {
		t.Fatalf("buffered %d GROUP_POSITION frames, want 1 (the own state with a vector)", n)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	fr, _, err := wire.Decode(buf.Bytes(), wire.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	p := fr.(*wire.GroupPosition)
	want := &wire.GroupPosition{Group: "tenant/a/workers", Time: p.Time,
		Through:     []wire.OriginOffset{{Region: "eu", Offset: 4}, {Region: "us", Offset: 1}},
		Outstanding: []wire.OriginOffset{{Region: "us", Offset: 1}, {Region: "eu", Offset: 3}}}
	if !reflect.DeepEqual(p, want) || p.Time == 0 {
		t.Fatalf("sent %+v, want %+v", p, want)
	}
	if n := f.bufferGroupPositions(w, c); n != 0 {
		t.Fatalf("buffered %d frames again without a change", n)
	}

	name := MirroredGroupName("eu", "tenant/a/workers")
	check := func(through uint64) {
		t.Helper()
		_, states, ok, err := l.Group(name)
		if err != nil || !ok || states["events"].Vector.Through["eu"] != through {
			t.Fatalf("stored %+v (%v %v), want eu through %d", states, ok, err, through)
		}
	}
	check(9)
	store := func(at int64, through uint64) {
		t.Helper()
		if err := m.storeGroupPosition(ctx, &wire.GroupPosition{Group: "tenant/a/workers", Time: at, Through: []wire.OriginOffset{{Region: "eu", Offset: through}}}); err != nil {
			t.Fatal(err)
		}
	}
	store(50, 7) // older: a late frame
	check(9)
	store(100, 8) // as old
	check(9)
	store(time.Now().UnixNano(), 12)
	check(12)
	if r, g, ok := ParseMirroredGroup(name); !ok || r != "eu" || g != "tenant/a/workers" {
		t.Errorf("ParseMirroredGroup(%q) = %q %q %v", name, r, g, ok)
	}
	for _, other := range []string{cursorName("eu"), MirroredPositionName("eu", "audit"), "workers"} {
		if _, _, ok := ParseMirroredGroup(other); ok {
			t.Errorf("%q parsed as a mirrored group", other)
		}
	}
}
