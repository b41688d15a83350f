package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/testlog"
	"github.com/quicmq/quicmq/wal"
)

// TestWildcardDurableKilledResumesExactly (issue 35, figure 3): a durable wildcard consumer
// over many topics (QUICMQ_WILD_DURABLE_TOPICS, default 2,000; 100,000 on demand), read
// through the SDK from a real node on loopback, is killed several times at seeded random
// points, either by closing its client's connection at once (acknowledgements the SDK had
// not sent are lost, those the node read are stored) or by restarting its node on the same
// data; between kills records are appended to random topics. Each run checks that no record
// comes twice, nothing a Commit confirmed comes again, each topic resumes no later than just
// after what was acknowledged (nothing lost) and its offsets are dense; at every kill the
// durable's stored positions are no more than the topics it acknowledged (a topic it has not
// read costs it nothing; a tenth of the topics are created empty and must never get one).
// At the end it reports the bytes stored by key prefix: the durable's positions ('p')
// beside the topics' own metadata ('t', 'r', 'c', 'i').
func TestWildcardDurableKilledResumesExactly(t *testing.T) {
	topics := 2000
	if v := os.Getenv("QUICMQ_WILD_DURABLE_TOPICS"); v != "" {
		var err error
		if topics, err = strconv.Atoi(v); err != nil || topics < 10 {
			t.Fatalf("QUICMQ_WILD_DURABLE_TOPICS=%q: want a number >= 10", v)
		}
	}
	rng := testlog.Rand(t, "the kill points, kinds and appends")
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Name: "n1", Region: "test", Logger: testLogger(t)}
	n, stop := startStoppable(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	names := make([]string, topics)
	var full []string
	for i := range names {
		names[i] = fmt.Sprintf("wd.%d", i)
		if i%10 == 9 { // created empty: matched, never read
			if _, err := n.Log().CreateTopic(ctx, names[i], wal.TopicConfig{}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		full = append(full, names[i])
	}
	heads := map[string]uint64{} // records appended per topic (offsets 0 .. head-1)
	appendOne(t, n, full, func(string) string { return "p" })
	for _, tp := range full {
		heads[tp] = 1
	}
	more := func() { // a second (third ...) record to a few random topics
		var tps []string
		for range 1 + len(full)/50 {
			tps = append(tps, full[rng.IntN(len(full))])
		}
		for _, tp := range tps {
			appendOne(t, n, []string{tp}, func(string) string { return "p" })
			heads[tp]++
		}
	}

	acked := map[string]uint64{}     // topic -> 1 + the highest offset acknowledged in any run
	committed := map[string]uint64{} // topic -> 1 + the highest offset a Commit confirmed stored
	ackedCount := func() int {
		k := 0
		for _, v := range acked {
			if v > 0 {
				k++
			}
		}
		return k
	}
	// run reads the durable until killAfter records came (then kills it by kind) or, with
	// killAfter < 0, until it caught up; it returns the records it got.
	run := func(cycle, killAfter int, kind string) int {
		conn := dialNode(t, n, client.Options{})
		sub, err := conn.Subscribe(ctx, "wd.>", client.SubscribeOptions{Durable: "d", NotifyCaughtUp: true})
		if err != nil {
			t.Fatalf("run %d: subscribe: %v", cycle, err)
		}
		next := map[string]uint64{} // topic -> the offset expected next in this run
		got, sinceCommit := 0, map[string]uint64{}
		commit := func() {
			if err := sub.Commit(ctx); err != nil {
				t.Fatalf("run %d: commit: %v", cycle, err)
			}
			for tp, v := range sinceCommit {
				committed[tp] = max(committed[tp], v)
			}
			clear(sinceCommit)
		}
		commitEvery := 1 + rng.IntN(200)
		for killAfter < 0 || got < killAfter {
			nctx, ncancel := context.WithTimeout(ctx, 30*time.Second)
			rec, err := sub.Next(nctx)
			ncancel()
			if errors.Is(err, client.ErrCaughtUp) {
				break
			}
			if err != nil {
				t.Fatalf("run %d: after %d records: %v", cycle, got, err)
			}
			want, seen := next[rec.Topic]
			switch {
			case !seen && rec.Offset < committed[rec.Topic]:
				t.Fatalf("run %d: %s@%d delivered again: a Commit had stored up to %d", cycle, rec.Topic, rec.Offset, committed[rec.Topic])
			case !seen && rec.Offset > acked[rec.Topic]:
				t.Fatalf("run %d: %s resumed at %d, past the %d acknowledged: lost", cycle, rec.Topic, rec.Offset, acked[rec.Topic])
			case seen && rec.Offset != want:
				t.Fatalf("run %d: %s@%d, want offset %d (dense, once)", cycle, rec.Topic, rec.Offset, want)
			case rec.Offset >= heads[rec.Topic]:
				t.Fatalf("run %d: %s@%d was never appended", cycle, rec.Topic, rec.Offset)
			}
			next[rec.Topic] = rec.Offset + 1
			got++
			if err := sub.Ack(rec); err != nil {
				t.Fatalf("run %d: ack: %v", cycle, err)
			}
			acked[rec.Topic] = max(acked[rec.Topic], rec.Offset+1)
			sinceCommit[rec.Topic] = rec.Offset + 1
			if got%commitEvery == 0 {
				commit()
			}
		}
		switch {
		case killAfter < 0:
			commit()
			sub.Close()
			conn.Close()
		case kind == "conn":
			conn.Close() // at once: the SDK's unsent acknowledgements are lost
		default:
			conn.Close()
			stop()
			n, stop = startStoppable(t, cfg)
		}
		// What the node stored is no more than what was acknowledged: a position per
		// topic read, never one for a topic not read. (A connection's ACKs may still be
		// being stored after its close: wait for the count to settle at or under it.)
		testlog.WaitForErr(t, 30*time.Second, "the durable's positions to cover only topics it acknowledged", func() error {
			stored, unread := 0, 0
			err := n.Log().Positions(wal.PositionFilter{}, func(p wal.PositionInfo) bool {
				if strings.HasSuffix(p.Name, "/d") || p.Name == "d" {
					stored++
					if acked[p.Topic] == 0 {
						unread++
					}
				}
				return true
			})
			switch {
			case err != nil:
				return err
			case unread > 0:
				return fmt.Errorf("%d positions of topics never acknowledged", unread)
			case stored > ackedCount():
				return fmt.Errorf("%d positions stored, %d topics acknowledged", stored, ackedCount())
			}
			return nil
		})
		t.Logf("run %d (%s): %d records; %d topics acknowledged, %d committed", cycle, kind, got, ackedCount(), len(committed))
		return got
	}

	begin := time.Now()
	kinds := []string{"conn", "restart"}
	for cycle := range 4 {
		left := len(full) - len(committed)
		kind := kinds[rng.IntN(len(kinds))]
		run(cycle, left/4+rng.IntN(left/2+1), kind)
		more()
	}
	run(4, -1, "end")
	for _, tp := range full {
		if acked[tp] != heads[tp] {
			t.Fatalf("%s: acknowledged up to %d of %d records: lost", tp, acked[tp], heads[tp])
		}
	}
	if got := run(5, -1, "end"); got != 0 {
		t.Fatalf("a run after everything was committed got %d records", got)
	}
	t.Logf("%d topics (%d with records): resumed exactly through 4 kills in %v", topics, len(full), time.Since(begin).Round(time.Millisecond))
	reportStoredBytes(t, n.Log().DB(), len(full))
}

// reportStoredBytes logs, per first byte of the log's keys, how many keys there are, their
// key and value bytes, and Pebble's estimate of their bytes on disk once flushed and
// compacted (blocks are prefix-compressed and snappy-compressed); and fails if the
// positions ('p') take more of either than the topics' own metadata.
func reportStoredBytes(t *testing.T, db *pebble.DB, read int) {
	t.Helper()
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Compact(context.Background(), []byte{0}, []byte{0xff}, true); err != nil {
		t.Fatal(err)
	}
	type sizes struct{ keys, kb, vb, disk uint64 }
	by := map[byte]*sizes{}
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		s := by[k[0]]
		if s == nil {
			s = &sizes{}
			by[k[0]] = s
		}
		s.keys++
		s.kb += uint64(len(k))
		s.vb += uint64(len(it.Value()))
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	var meta, pos sizes
	var b strings.Builder
	fmt.Fprintf(&b, "stored bytes by key prefix, %d topics read:\n| prefix | keys | key bytes | value bytes | on disk (estimate) | per topic read, logical |\n|---|---|---|---|---|---|\n", read)
	for _, p := range []byte("tircpm") {
		s := by[p]
		if s == nil {
			continue
		}
		if s.disk, err = db.EstimateDiskUsage([]byte{p}, []byte{p + 1}); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "| %c | %d | %d | %d | %d | %.1f |\n", p, s.keys, s.kb, s.vb, s.disk, float64(s.kb+s.vb)/float64(read))
		switch p {
		case 'p':
			pos = *s
		case 't', 'i', 'r', 'c':
			meta.keys += s.keys
			meta.kb += s.kb
			meta.vb += s.vb
			meta.disk += s.disk
		}
	}
	fmt.Fprintf(&b, "positions / the topics' metadata: logical %.2f, on disk %.2f", float64(pos.kb+pos.vb)/float64(meta.kb+meta.vb), float64(pos.disk)/float64(max(meta.disk, 1)))
	t.Log(b.String())
}
