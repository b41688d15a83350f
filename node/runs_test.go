package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/wire"
)

// runsTopics publishes per records to each of topics topics "prefix.N" through c.
func runsTopics(t *testing.T, c *client.Conn, prefix string, topics, per int) {
	t.Helper()
	ctx := context.Background()
	for i := range topics {
		for k := range per {
			msg := client.Message{Topic: fmt.Sprintf("%s.%d", prefix, i), Payload: []byte(fmt.Sprintf("%d-%d", i, k))}
			if k == 1 {
				msg.Headers, msg.ProducerID, msg.Sequence = []client.Header{{Key: "k", Value: []byte("v")}}, "p", uint64(i+1)
			}
			if _, err := c.Publish(ctx, msg); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// runsRead reads s until CAUGHT_UP, checking that every topic's records arrive in offset
// order with their payloads "N-k", and returns the frame types seen, each topic's records
// and its index on the stream. A RUNS entry that binds an index counts as its TOPIC.
func runsRead(t *testing.T, s *rawStream, prefix string) (types map[wire.Type]int, got map[string][]uint64, index map[string]uint64) {
	t.Helper()
	types, got, index = map[wire.Type]int{}, map[string][]uint64{}, map[string]uint64{}
	names := map[uint64]string{}
	take := func(r *wire.Record) {
		if r.Bind != "" {
			names[r.Index], index[r.Bind] = r.Bind, r.Index
		}
		name, ok := names[r.Index]
		if !ok {
			t.Fatalf("record of index %d before its binding", r.Index)
		}
		var i, k int
		if _, err := fmt.Sscanf(string(r.Payload), "%d-%d", &i, &k); err != nil || name != fmt.Sprintf("%s.%d", prefix, i) || uint64(k) != r.Offset {
			t.Fatalf("%s@%d: payload %q", name, r.Offset, r.Payload)
		}
		if (k == 1) != (len(r.Headers) == 1 && r.ProducerID == "p" && r.Sequence == uint64(i+1)) {
			t.Fatalf("%s@%d: headers %v, producer %q %d", name, r.Offset, r.Headers, r.ProducerID, r.Sequence)
		}
		if r.OriginRegion != "test" || r.OriginOffset != r.Offset || r.Time == 0 {
			t.Fatalf("%s@%d: origin %s@%d, time %d", name, r.Offset, r.OriginRegion, r.OriginOffset, r.Time)
		}
		if prev := got[name]; len(prev) > 0 && prev[len(prev)-1]+1 != r.Offset {
			t.Fatalf("%s: offset %d after %v", name, r.Offset, prev)
		}
		got[name] = append(got[name], r.Offset)
	}
	for {
		f := s.next()
		types[f.Type()]++
		switch f := f.(type) {
		case *wire.CaughtUp:
			return types, got, index
		case *wire.Topic:
			names[f.Index], index[f.Name] = f.Name, f.Index
		case *wire.Record:
			take(f)
		case *wire.Records:
			for i := range f.Records {
				take(&f.Records[i])
			}
		case *wire.Runs:
			for i := range f.Records {
				take(&f.Records[i])
			}
		case *wire.ErrorFrame:
			t.Fatalf("subscription error: %v", f.AsError())
		}
	}
}

// A wildcard subscription on a connection of version 3 that accepts batched frames gets its
// records in RUNS frames, each topic bound in its first record's entry, each topic's records
// in order; its ACKs name the indexes the entries bound, and a durable resumes after them. On
// version 2, or without the flag, the same subscription gets exactly today's frames; a
// literal topic gets RECORDS on version 3 too.
func TestRunsFrames(t *testing.T) {
	n := newTestNode(t)
	const topics, per = 40, 3
	runsTopics(t, dialNode(t, n, client.Options{}), "rw", topics, per)
	check := func(name string, got map[string][]uint64, want int) {
		t.Helper()
		if len(got) != want {
			t.Fatalf("%s: %d topics, want %d", name, len(got), want)
		}
		for topic, offs := range got {
			if len(offs) != per || offs[0] != 0 {
				t.Fatalf("%s: %s got offsets %v", name, topic, offs)
			}
		}
	}
	flags := uint64(wire.SubscribeRecords | wire.SubscribeCaughtUp)

	v3 := mustDialVersion(t, n, 3)
	s := subscribe(t, v3, &wire.Subscribe{Pattern: "rw.>", Flags: flags})
	types, got, _ := runsRead(t, s, "rw")
	check("version 3", got, topics)
	if types[wire.TypeTopic]+types[wire.TypeRecord]+types[wire.TypeRecords] != 0 || types[wire.TypeRuns] == 0 || types[wire.TypeRuns] > 3 {
		t.Fatalf("version 3 wildcard: frames %v, want a few RUNS and nothing else", types)
	}
	s.str.Close()

	v2 := mustDialVersion(t, n, 2)
	s = subscribe(t, v2, &wire.Subscribe{Pattern: "rw.>", Flags: flags})
	types, got, _ = runsRead(t, s, "rw")
	check("version 2", got, topics)
	if types[wire.TypeRuns] != 0 || types[wire.TypeTopic] != topics || types[wire.TypeRecords] != topics {
		t.Fatalf("version 2 wildcard: frames %v, want a TOPIC and a RECORDS per topic", types)
	}
	s.str.Close()

	s = subscribe(t, v3, &wire.Subscribe{Pattern: "rw.>", Flags: wire.SubscribeCaughtUp})
	types, got, _ = runsRead(t, s, "rw")
	check("version 3 without RECORDS", got, topics)
	if types[wire.TypeRuns]+types[wire.TypeRecords] != 0 || types[wire.TypeRecord] != topics*per {
		t.Fatalf("version 3 wildcard without the flag: frames %v, want TOPIC and RECORD", types)
	}
	s.str.Close()

	s = subscribe(t, v3, &wire.Subscribe{Pattern: "rw.7", Flags: flags})
	types, got, _ = runsRead(t, s, "rw")
	check("version 3 literal", got, 1)
	if types[wire.TypeRuns] != 0 || types[wire.TypeRecords] != 1 {
		t.Fatalf("version 3 literal topic: frames %v, want TOPIC and RECORDS", types)
	}
	s.str.Close()

	// A durable acknowledges by the indexes RUNS bound: rw.5 through offset 1, rw.9 through 2.
	s = subscribe(t, v3, &wire.Subscribe{Pattern: "rw.>", Durable: "d", Flags: flags})
	_, _, index := runsRead(t, s, "rw")
	s.send(&wire.Ack{Index: index["rw.5"], Offset: 1}, &wire.Ack{Index: index["rw.9"], Offset: 2}, &wire.Commit{Seq: 1})
	if f := s.next(); f.Type() != wire.TypeCommitted {
		t.Fatalf("after ACKs and COMMIT: %s %+v", f.Type(), f)
	}
	// An index no entry bound is a wrong ACK.
	s.send(&wire.Ack{Index: topics + 5, Offset: 0})
	if e := s.expectError(); e.Code != wire.CodeInvalidArgument {
		t.Fatalf("ACK of an unbound index: %v", e)
	}
	s = subscribe(t, v3, &wire.Subscribe{Pattern: "rw.>", Durable: "d", Flags: flags})
	_, got, _ = runsRead(t, s, "rw")
	if len(got) != topics-1 || len(got["rw.5"]) != 1 || got["rw.5"][0] != 2 || got["rw.9"] != nil || len(got["rw.0"]) != per {
		t.Fatalf("resumed durable: rw.5 %v, rw.9 %v, rw.0 %v, %d topics", got["rw.5"], got["rw.9"], got["rw.0"], len(got))
	}
	s.str.Close()
}

// A topic whose first record the subscription reads is one a vector covers is bound by a
// TOPIC frame, so that its later records, in RUNS entries that carry no name, are still named.
func TestRunsBindCoveredTopic(t *testing.T) {
	n := newTestNode(t)
	c := dialNode(t, n, client.Options{})
	runsTopics(t, c, "rv", 3, 3)
	v3 := mustDialVersion(t, n, 3)
	// rv.1 holds offsets 0-2; the vector covers up to 4: records 3 and 4, when they come, are
	// skipped.
	vec := []wire.TopicVector{{Topic: "rv.1", Origins: []wire.OriginOffset{{Region: "test", Offset: 4}}}}
	s := subscribe(t, v3, &wire.Subscribe{Pattern: "rv.>", Flags: wire.SubscribeRecords | wire.SubscribeCaughtUp, Vector: vec})
	types, got, _ := runsRead(t, s, "rv")
	if len(got) != 2 || len(got["rv.0"]) != 3 || len(got["rv.2"]) != 3 || types[wire.TypeTopic] != 0 {
		t.Fatalf("frames %v; rv.0 %v, rv.1 %v, rv.2 %v", types, got["rv.0"], got["rv.1"], got["rv.2"])
	}
	for k := 3; k < 6; k++ {
		if _, err := c.Publish(context.Background(), client.Message{Topic: "rv.1", Payload: []byte(fmt.Sprintf("1-%d", k))}); err != nil {
			t.Fatal(err)
		}
	}
	var bound *wire.Topic
	for {
		switch f := s.next().(type) {
		case *wire.Topic:
			bound = f
		case *wire.Runs:
			r := f.Records[0]
			if bound == nil || bound.Name != "rv.1" || r.Index != bound.Index || r.Bind != "" || r.Offset != 5 || len(f.Records) != 1 {
				t.Fatalf("after TOPIC %+v: RUNS %+v, want rv.1@5 under its index", bound, f.Records)
			}
			return
		default:
			t.Fatalf("unexpected %s %+v", f.Type(), f)
		}
	}
}

// A region replay passes the serving region's stream through to the client unchanged, and a
// peer link speaks wire.PeerVersion: a wildcard replayed from another region comes in TOPIC
// and RECORDS frames on a connection of version 3 as on one of version 2, and the SDK reads it.
func TestRunsNotOnPeerLinks(t *testing.T) {
	m := newTestMesh(t, "eu", "us")
	runsTopics(t, m.dial("us"), "pl", 5, 3)
	flags := uint64(wire.SubscribeRecords)
	for _, v := range []uint64{2, 3} {
		rc := mustDialVersion(t, m.nodes["eu"], v)
		s := subscribe(t, rc, &wire.Subscribe{Pattern: "pl.>", Region: "us", Flags: flags})
		types := map[wire.Type]int{}
		for recs := 0; recs < 15; {
			f := s.next()
			types[f.Type()]++
			switch f := f.(type) {
			case *wire.Records:
				recs += len(f.Records)
			case *wire.Record:
				recs++
			case *wire.Runs:
				t.Fatalf("version %d: RUNS on a stream passed through from a peer", v)
			case *wire.ErrorFrame:
				t.Fatalf("version %d: %v", v, f.AsError())
			}
		}
		if types[wire.TypeTopic] != 5 || types[wire.TypeRecords] != 5 {
			t.Fatalf("version %d: frames %v, want a TOPIC and a RECORDS per topic", v, types)
		}
		s.str.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sub, err := m.dial("eu").Subscribe(ctx, "pl.>", client.SubscribeOptions{Region: "us"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for i := range 15 {
		if _, err := sub.Next(ctx); err != nil {
			t.Fatalf("SDK, record %d: %v", i, err)
		}
	}
}
