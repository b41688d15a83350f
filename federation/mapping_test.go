package federation

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/wal"
)

// dialPeer connects to n's listener as a node of the mesh would (mutual TLS, the peer ALPN),
// with a certificate issued for name.
func dialPeer(t *testing.T, m *fedMesh, n *fedNode, name string) *quic.Conn {
	t.Helper()
	cert, err := m.ca.Issue(name, []string{name})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, *n.addr.Load(), &tls.Config{
		Certificates: []tls.Certificate{cert}, RootCAs: m.pool,
		NextProtos: []string{wire.PeerALPN}, ServerName: n.name, MinVersion: tls.VersionTLS13,
	}, &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.CloseWithError(0, "test over") })
	return conn
}

// readMirrorFrames reads str until a HEAD (of the topic numbered index, on a shared stream)
// reports the scan at position, returning the RECORDs of that topic before it. Any ERROR is
// returned as the error.
func readMirrorFrames(t *testing.T, r *wire.Reader, index, position uint64) ([]*wire.Record, error) {
	t.Helper()
	var recs []*wire.Record
	var headIndex uint64
	for {
		f, err := r.Read()
		if err != nil {
			return recs, err
		}
		switch f := f.(type) {
		case *wire.Record:
			if f.Index == index {
				recs = append(recs, f)
			}
		case *wire.Topic:
			headIndex = f.Index
		case *wire.Head:
			if headIndex == index && f.Position == position {
				return recs, nil
			}
		case *wire.ErrorFrame:
			return recs, f.AsError()
		}
	}
}

// The serving side runs the same checks whichever mapping a peer asks for: a peer reading
// region b's log of a topic gets only the records that originated in b (never those b
// mirrored from region c: a peer cannot read, through either mapping, what b does not serve
// as its own), the same records in both mappings, and a request for an invalid topic ends
// the stream with ERROR invalid-topic.
func TestMappingsServeTheSameChecks(t *testing.T) {
	m := newFedMesh(t)
	b := m.addNode("b", nodeOpts{sharedLink: true})
	// b's log of chk.t: its own records with records mirrored from region c between them.
	for i := range 6 {
		b.publishSeq(t, "chk.t", i*10, i*10+10)
		if res := b.log.Append(context.Background(), wal.AppendRequest{Topic: "chk.t", Records: []wal.Record{
			{OriginRegion: "c", OriginOffset: uint64(i), Payload: fmt.Appendf(nil, "c-%d", i)},
		}}); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	_, next, _ := b.log.Bounds("chk.t")

	var served [2][]*wire.Record
	for i, shared := range []bool{false, true} {
		conn := dialPeer(t, m, b, "node-a")
		str, err := conn.OpenStreamSync(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		str.SetReadDeadline(time.Now().Add(20 * time.Second)) // a test's bound, not a wait
		w := wire.NewWriter(str)
		if shared {
			w.Write(&wire.Mirror{Topic: sharedLinkMarker})
		}
		w.Write(&wire.Mirror{Topic: "chk.t", From: 0})
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		r := wire.NewReader(str, wire.Limits{MaxFrame: 8 << 20, MaxPayload: 8 << 20})
		recs, err := readMirrorFrames(t, r, 0, next)
		if err != nil {
			t.Fatalf("shared=%v: %v", shared, err)
		}
		if len(recs) != 60 {
			t.Fatalf("shared=%v: %d records served, want b's own 60", shared, len(recs))
		}
		for k, rec := range recs {
			if rec.OriginRegion != "b" || string(rec.Payload) != fmt.Sprintf("b-%d", k) || rec.OriginOffset != rec.Offset {
				t.Fatalf("shared=%v: record %d: origin %s/%d payload %q: want b's own record b-%d", shared, k, rec.OriginRegion, rec.OriginOffset, rec.Payload, k)
			}
		}
		served[i] = recs

		// An invalid topic: on a stream of its own as its first frame, on the shared stream
		// as a later request.
		if !shared {
			str2, err := conn.OpenStreamSync(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			str2.SetReadDeadline(time.Now().Add(20 * time.Second))
			r = wire.NewReader(str2, wire.Limits{})
			w = wire.NewWriter(str2)
		}
		w.Write(&wire.Mirror{Topic: "chk..bad"})
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		_, err = readMirrorFrames(t, r, 99, 0)
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != wire.CodeInvalidTopic {
			t.Fatalf("shared=%v: invalid topic answered %v, want ERROR invalid topic", shared, err)
		}
	}
	for k := range served[0] {
		a, s := served[0][k], served[1][k]
		if a.Offset != s.Offset || string(a.Payload) != string(s.Payload) || a.Time != s.Time {
			t.Fatalf("record %d differs between the mappings: %+v and %+v", k, a, s)
		}
	}
}

// On the shared mapping the mirroring side runs the product's core: each batch is appended
// with its cursor in one synced commit (after the federation stops, the stored cursor is the
// origin offset of the last record mirrored), and a federation restarted on the same log,
// and a link cut, resume from that cursor with no gap and no duplicate.
func TestSharedMappingKeepsTheCursorInTheBatch(t *testing.T) {
	m := newFedMesh(t)
	a := m.addNode("a", nodeOpts{mirror: []string{"cur.>"}, sharedLink: true})
	b := m.addNode("b", nodeOpts{sharedLink: true})
	p := startPublisher(t, b, "cur.t", 7, 2*time.Millisecond)
	testlog.WaitFor(t, 10*time.Second, "records mirrored", func() bool { return a.next("cur.t") >= 100 })

	checkCursor := func(when string) {
		t.Helper()
		pos, ok, err := a.log.Position(cursorName("b"), "cur.t")
		recs := readAll(t, a.log, "cur.t")
		if err != nil || !ok || len(recs) == 0 {
			t.Fatalf("%s: cursor %d %v %v, %d records", when, pos, ok, err, len(recs))
		}
		if last := recs[len(recs)-1].OriginOffset; pos != last {
			t.Fatalf("%s: stored cursor %d, last mirrored origin offset %d: the cursor left its batch", when, pos, last)
		}
	}
	a.stopFed()
	checkCursor("after the federation stopped")
	a.startFed()
	testlog.WaitFor(t, 10*time.Second, "mirroring resumed", func() bool { return a.next("cur.t") >= 300 })
	if n := a.fedNow().cutLinks("b"); n != 1 {
		t.Fatalf("cut %d connections, want 1", n)
	}
	testlog.WaitFor(t, 10*time.Second, "mirroring resumed after the cut", func() bool { return a.next("cur.t") >= 500 })
	if got := sharedOpened(a.fedNow()); got != 1 {
		t.Fatalf("shared streams opened on the current connection: %d, want 1", got)
	}
	p.halt()
	sent := uint64(p.sent.Load())
	testlog.WaitFor(t, 10*time.Second, "every record mirrored", func() bool { return a.next("cur.t") == sent })
	if n := checkMirrored(t, a, b, "cur.t"); uint64(n) != sent {
		t.Fatalf("%d records mirrored, want %d", n, sent)
	}
	a.stopFed()
	checkCursor("at the end")
}
