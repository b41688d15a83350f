package federation

import (
	"context"
	"log/slog"
	"maps"
	"testing"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/wal"
)

// TestStorePosition: a POSITION from a peer region is stored under its mirrored name with its
// vector, and one that is not newer (a superseded link's late frame) never replaces it. The
// names parse back.
func TestStorePosition(t *testing.T) {
	l, err := wal.Open(t.TempDir(), wal.Options{RetentionInterval: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	if res := l.Append(ctx, wal.AppendRequest{Topic: "events", Records: []wal.Record{{Payload: []byte("x")}}}); res.Err != nil {
		t.Fatal(res.Err)
	}
	lk := &link{f: &Federation{cfg: Config{Log: l}}, peer: Peer{Region: "eu"}, log: slog.New(slog.DiscardHandler)}
	m := &mirror{l: lk, topic: "events"}
	store := func(at int64, eu uint64) {
		t.Helper()
		if err := m.storePosition(ctx, &wire.Position{Durable: "tenant/a/audit", Time: at, Origins: []wire.OriginOffset{{Region: "eu", Offset: eu}}}); err != nil {
			t.Fatal(err)
		}
	}
	name := MirroredPositionName("eu", "tenant/a/audit")
	check := func(want uint64) {
		t.Helper()
		_, vec, ok, err := l.PositionVector(name, "events")
		if err != nil || !ok || !maps.Equal(vec, map[string]uint64{"eu": want}) {
			t.Fatalf("stored %v (%v %v), want eu:%d", vec, ok, err, want)
		}
	}
	store(100, 5)
	check(5)
	store(200, 9)
	check(9)
	store(150, 7) // older than the one stored: a late frame
	check(9)
	store(200, 8) // as old
	check(9)
	if r, d, ok := ParseMirroredPosition(name); !ok || r != "eu" || d != "tenant/a/audit" {
		t.Errorf("ParseMirroredPosition(%q) = %q %q %v", name, r, d, ok)
	}
	if _, _, ok := ParseMirroredPosition(cursorName("eu")); ok {
		t.Error("a mirror cursor parsed as a mirrored position")
	}
}
