package linearize

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/quicmq/quicmq/internal/campaign"
)

// hist builds a history by hand, times in arbitrary units.
type hist struct{ h *History }

func newHist() *hist { return &hist{&History{}} }

func key(p string, seq uint64) Key { return Key{Producer: p, Seq: seq} }

func (b *hist) pub(client int, k Key, call, ret int64, o Outcome, offset uint64) *hist {
	b.h.pubs = append(b.h.pubs, &Publish{Client: client, Node: "n1", Topic: "t", Key: k, Call: call, Return: ret, Outcome: o, Offset: offset})
	return b
}

func (b *hist) read(client int, node string, call, ret int64, keys ...Key) *hist {
	b.h.reads = append(b.h.reads, &Read{Client: client, Node: node, Topic: "t", Call: call, Return: ret, Keys: keys})
	return b
}

// final adds final reads of the same log at every node given.
func (b *hist) final(call, ret int64, nodes []string, keys ...Key) *hist {
	for _, n := range nodes {
		recs := make([]campaign.Rec, len(keys))
		for i, k := range keys {
			recs[i] = campaign.Rec{Offset: uint64(i), OriginRegion: "region", OriginOffset: uint64(i), Producer: k.Producer, Seq: k.Seq, Payload: campaign.Payload(k)}
		}
		b.h.reads = append(b.h.reads, &Read{Client: 99, Node: n, Topic: "t", Call: call, Return: ret, Keys: keys, Final: true, Recs: recs})
	}
	return b
}

var three = []string{"n1", "n2", "n3"}

func check(t *testing.T, b *hist) *Report {
	t.Helper()
	return Check(b.h, Config{VisualizeDir: t.TempDir()})
}

func TestValidHistoriesPass(t *testing.T) {
	a, b, c, d := key("p1", 0), key("p1", 1), key("p2", 0), key("p2", 1)
	cases := map[string]*hist{
		"sequential": newHist().pub(0, a, 0, 10, OK, 0).pub(0, b, 11, 20, OK, 1).read(1, "n2", 21, 30, a, b).final(100, 110, three, a, b),
		// Concurrent publishes may commit in either order; a read overlapping
		// them may see either prefix.
		"concurrent": newHist().pub(0, a, 0, 20, OK, 1).pub(1, c, 1, 19, OK, 0).read(2, "n3", 2, 18, c).read(3, "n2", 21, 30, c, a).final(100, 110, three, c, a),
		// Pipelined publishes on one connection, acknowledged in order.
		"pipelined": newHist().pub(0, a, 0, 30, OK, 0).pub(0, b, 1, 31, OK, 1).pub(1, c, 2, 32, OK, 2).pub(1, d, 3, 33, OK, 3).final(100, 110, three, a, b, c, d),
		// Unanswered, then retried: answered with the stored copy's offset.
		"retry after unknown": newHist().pub(0, a, 0, 0, Unknown, 0).pub(0, b, 1, 0, Unknown, 0).pub(1, c, 5, 12, OK, 2).
			pub(2, a, 10, 20, OK, 0).pub(2, b, 11, 21, OK, 1).final(100, 110, three, a, b, c),
		// Unanswered and never stored; refused and not stored.
		"unknown lost, refusal": newHist().pub(0, a, 0, 10, OK, 0).pub(0, b, 11, 0, Unknown, 0).pub(1, c, 12, 13, Refused, 0).
			pub(1, d, 14, 20, OK, 1).final(100, 110, three, a, d),
		// Unanswered, stored, never retried.
		"unknown stored": newHist().pub(0, a, 0, 0, Unknown, 0).pub(1, c, 5, 12, OK, 1).read(2, "n1", 13, 14, a, c).final(100, 110, three, a, c),
		// A lagging replica's read still sees every record acknowledged before
		// it began, and a prefix of what came after.
		"follower read": newHist().pub(0, a, 0, 10, OK, 0).pub(0, b, 11, 40, OK, 1).read(1, "n3", 12, 15, a).final(100, 110, three, a, b),
		"empty":         newHist().final(100, 110, three),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			r := check(t, b)
			if !r.OK() {
				t.Fatalf("a valid history failed: %v", r)
			}
			t.Log(r)
		})
	}
}

func TestBrokenHistoriesFail(t *testing.T) {
	a, b, c := key("p1", 0), key("p1", 1), key("p2", 0)
	cases := []struct {
		name string
		h    *hist
		want []string // in the report: the topic's name is "t"
	}{
		{"lost ack", newHist().pub(0, a, 0, 10, OK, 0).pub(0, b, 11, 20, OK, 1).final(100, 110, three, a),
			[]string{"lost: p1/1 acknowledged at region t@1", "t: not linearizable", "publish p1/1 via n1 -> ok @1"}},
		{"ack at a wrong offset", newHist().pub(0, a, 0, 10, OK, 0).pub(0, b, 11, 20, OK, 5).final(100, 110, three, a, b),
			[]string{"p1/1 acknowledged at region t@5 is stored at t@1", "t: not linearizable", "no order admits publish p1/1 via n1 -> ok @5"}},
		{"duplicate", newHist().pub(0, a, 0, 10, OK, 0).pub(0, b, 11, 20, OK, 1).final(100, 110, three, a, b, a),
			[]string{"p1/0 stored twice: t@0 and t@2", "t: not linearizable", "final read"}},
		{"read of a record that never commits", newHist().pub(0, a, 0, 10, OK, 0).pub(1, c, 11, 0, Unknown, 0).read(2, "n2", 12, 20, a, c).final(100, 110, three, a),
			[]string{"t: served past commit: read from 0 at n2 -> 2 records", "observed p2/0 at offset 1; the final log holds nothing there", "t: not linearizable"}},
		{"stale read after a newer write completed", newHist().pub(0, a, 0, 10, OK, 0).pub(0, b, 11, 20, OK, 1).read(1, "n3", 30, 40, a).final(100, 110, three, a, b),
			[]string{"t: not linearizable", "no order admits read from 0 at n3 -> 1 records (@0 p1/0)"}},
		{"two acks of one offset", newHist().pub(0, a, 0, 10, OK, 0).pub(1, c, 11, 20, OK, 0).final(100, 110, three, a),
			[]string{"offset conflict: region t@0 acknowledged for p1/0 and for p2/0", "t: not linearizable", "publish p2/0 via n1 -> ok @0"}},
		{"retry answered with another offset", newHist().pub(0, a, 0, 10, OK, 0).pub(1, c, 11, 20, OK, 1).pub(0, a, 21, 30, OK, 2).final(100, 110, three, a, c),
			[]string{"a retry answered with another offset", "t: not linearizable"}},
		{"replicas diverge", func() *hist {
			b := newHist().pub(0, a, 0, 10, OK, 0).final(100, 110, []string{"n1", "n2"}, a).final(100, 110, []string{"n3"}, c)
			return b
		}(), []string{"t: n3's log differs from n1's at offset 0: p2/0 (offset 0) against p1/0 (offset 0)", "t: not linearizable"}},
		{"refused yet stored", newHist().pub(0, a, 0, 10, Refused, 0).final(100, 110, three, a),
			[]string{"t: p1/0 is stored at offset 0, yet publish p1/0 via n1 -> refused", "t: not linearizable"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := check(t, tc.h)
			if r.OK() {
				t.Fatalf("a broken history passed: %v", r)
			}
			s := r.String()
			for _, w := range tc.want {
				if !strings.Contains(s, w) {
					t.Errorf("the report does not say %q:\n%s", w, s)
				}
			}
			if r.Linearizable["t"] != porcupine.Illegal {
				t.Errorf("linearizability %v, want Illegal", r.Linearizable["t"])
			}
			if len(r.Visualizations) != 1 {
				t.Fatalf("visualizations %v, want one", r.Visualizations)
			}
			if fi, err := os.Stat(r.Visualizations[0]); err != nil || fi.Size() == 0 {
				t.Fatalf("visualization %s: %v", r.Visualizations[0], err)
			}
			t.Log(s)
		})
	}
}

// TestUnknownIsNotAPass: a history porcupine cannot decide within the bound
// is reported as unknown, and the report is not OK.
func TestUnknownIsNotAPass(t *testing.T) {
	b := newHist()
	for i := range 10 {
		b.pub(0, key("p", uint64(i)), int64(i), int64(i)+1, OK, uint64(i))
	}
	r := Check(b.h, Config{MaxOps: 5, VisualizeDir: t.TempDir()})
	if r.OK() || r.Linearizable["t"] != porcupine.Unknown || !strings.Contains(r.String(), "over the bound of 5") {
		t.Fatalf("an unchecked history: %v", r)
	}
}

// TestRecorderRoundTrip: the recorder's operations are what Check reads.
func TestRecorderRoundTrip(t *testing.T) {
	h := NewHistory()
	a, b := key("p", 0), key("p", 1)
	h.Publish(0, "n1", "t", a).OK(0)
	rd := h.Read(2, "n3", "t") // overlaps b's publish: may or may not see it
	h.Publish(0, "n1", "t", b).Unknown(os.ErrDeadlineExceeded)
	op := h.Publish(1, "n2", "t", b)
	op.OK(1)
	rd.Done([]Key{a})
	for _, n := range three {
		h.Read(3, n, "t").Final([]campaign.Rec{
			{Offset: 0, OriginRegion: "eu", OriginOffset: 0, Producer: "p", Seq: 0, Payload: campaign.Payload(a)},
			{Offset: 1, OriginRegion: "eu", OriginOffset: 1, Producer: "p", Seq: 1, Payload: campaign.Payload(b)},
		})
	}
	r := Check(h, Config{Region: "eu", VisualizeDir: t.TempDir()})
	if !r.OK() || r.OKs != 2 || r.Unanswered != 1 || r.Reads != 1 || r.FinalReads != 3 {
		t.Fatalf("%v", r)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a publish answered twice did not panic")
		}
	}()
	op.OK(1)
}

// TestLongHistoryIsDecided: a campaign-sized history of one topic (20,000
// pipelined publishes from 8 producers, bursts of unanswered ones retried
// later, overlapping reads of lagging prefixes) is decided, and quickly:
// the deductions from the final reads keep porcupine's search linear.
func TestLongHistoryIsDecided(t *testing.T) {
	const n, producers = 20_000, 8
	b := newHist()
	var log []Key
	var now int64
	seqs := make([]uint64, producers)
	type inflight struct {
		k    Key
		call int64
	}
	var lost []inflight // unanswered: stored (or not), retried later
	for i := 0; i < n; i++ {
		now += 3
		p := i % producers
		k := key(string(rune('a'+p)), seqs[p])
		seqs[p]++
		call := now - 40 // pipelined: invoked well before it commits
		switch {
		case i%1000 < 30: // a burst around a "kill": unanswered, half of them stored
			if i%2 == 0 {
				log = append(log, k)
			}
			b.pub(p, k, call, 0, Unknown, 0)
			lost = append(lost, inflight{k, call})
		default:
			log = append(log, k)
			b.pub(p, k, call, now+5, OK, uint64(len(log)-1))
		}
		if i%1000 == 40 { // the retries: answered with the stored copy's offset, or stored now
			for _, l := range lost {
				at := -1
				for j := len(log) - 1; j >= 0 && j >= len(log)-200; j-- {
					if log[j] == l.k {
						at = j
					}
				}
				if at < 0 {
					log = append(log, l.k)
					at = len(log) - 1
				}
				b.pub(100, l.k, now, now+10, OK, uint64(at))
			}
			lost = nil
		}
		if i%500 == 0 { // a reader that began before the last acks and saw up to here
			b.read(200+i%3, "n2", now-1, now+1, append([]Key(nil), log...)...)
		}
	}
	b.final(now+100, now+200, three, log...)
	start := time.Now()
	r := Check(b.h, Config{Timeout: time.Minute, VisualizeDir: t.TempDir()})
	if !r.OK() {
		t.Fatalf("a valid long history failed: %v", r)
	}
	t.Logf("%d operations decided in %v: %v", len(b.h.pubs)+len(b.h.reads), time.Since(start).Round(time.Millisecond), r)
}
