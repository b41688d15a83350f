package wire

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

func addSeeds(f *testing.F) {
	var all []byte
	for _, fr := range sampleFrames() {
		b := Append(nil, fr)
		f.Add(b)
		all = append(all, b...)
	}
	f.Add(all)
	for _, fr := range manageFrames() { // manage_test.go
		f.Add(Append(nil, fr))
	}
	f.Add(recordsSeed())
	f.Add(runsSeed())
	f.Add(publishBatchSeed())
	f.Add(publishMultiSeed())
	f.Add(Append(nil, &Subscribe{Pattern: "a.>", Flags: SubscribeRecords}))
	f.Add(Append(nil, &Subscribe{Pattern: "a.>", Start: 9, Flags: SubscribeRecords | SubscribeCaughtUp}))
	f.Add([]byte{byte(TypeCaughtUp), 0, 0, 0, 1, 0x80}) // a varint cut short
	f.Add(Append(nil, &PublishOpen{Flags: PublishAnyOrder}))
	f.Add(groupSeed())
	f.Add(vectorSeed())
	f.Add(groupPositionSeed())
	f.Add([]byte{byte(TypePublish), 0xff, 0xff, 0xff, 0xff})
	// Publishes over per-publish limits (refused, not malformed) between good ones.
	var refused []byte
	refused = Append(refused, &Publish{Seq: 1, Topic: strings.Repeat("t", 41), Payload: []byte("x")})
	refused = Append(refused, &Publish{Seq: 2, Topic: "a", Headers: make([]Header, 9)})
	refused = Append(refused, &Publish{Seq: 3, Topic: "a", Headers: []Header{{Key: strings.Repeat("k", 301)}}})
	refused = Append(refused, &PublishBatch{Seq: 4, Topic: "a", Publishes: []Publish{{}, {ProducerID: strings.Repeat("p", 301)}, {}}})
	refused = Append(refused, &PublishMulti{Seq: 7, Publishes: []Publish{{Topic: "a"}, {Topic: strings.Repeat("t", 41)}, {Topic: "b", ProducerID: strings.Repeat("p", 301)}, {Topic: "b"}}})
	f.Add(refused)
	f.Add([]byte{})
}

// FuzzDecode: whatever bytes arrive, decoding never panics, and every frame that decodes
// re-encodes to bytes that decode to the same frame (decode -> encode -> decode is stable).
func FuzzDecode(f *testing.F) {
	addSeeds(f)
	lim := Limits{MaxFrame: 1 << 16, MaxPayload: 1 << 15, MaxHeaders: 8, MaxHeaderBytes: 256, MaxString: 300, MaxTopic: 40}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data), lim)
		for {
			fr, err := r.Read()
			if err != nil {
				if err != io.EOF && !errors.Is(err, io.ErrUnexpectedEOF) &&
					!errors.Is(err, ErrMalformed) && !errors.Is(err, ErrFrameTooLarge) {
					t.Fatalf("unexpected error kind: %v", err)
				}
				return
			}
			again, n, err := Decode(Append(nil, fr), lim)
			if err != nil {
				t.Fatalf("re-encoded %s does not decode: %v", fr.Type(), err)
			}
			if !reflect.DeepEqual(normalize(again), normalize(fr)) {
				t.Fatalf("round trip changed %s:\n%#v\n%#v", fr.Type(), fr, again)
			}
			_ = n
			checkPublishLimits(t, fr, lim)
			switch rs := fr.(type) {
			case *Records:
				checkDecoderRun(t, rs, rs.Records, lim)
			case *Runs:
				checkDecoderRun(t, rs, rs.Records, lim)
			}
		}
	})
}

// checkPublishLimits: a decoded publish either holds every per-publish limit, or is refused
// (with the code of the limit) and carries nothing but its Seq and Topic.
func checkPublishLimits(t *testing.T, fr Frame, lim Limits) {
	var ps []Publish
	switch v := fr.(type) {
	case *Publish:
		ps = []Publish{*v}
	case *PublishBatch:
		ps = v.Publishes
	case *PublishMulti:
		ps = v.Publishes
	}
	for _, p := range ps {
		if p.Refused != nil {
			if p.Refused.Code != CodeTooLarge && p.Refused.Code != CodeInvalidTopic {
				t.Fatalf("publish %d refused with code %d: %v", p.Seq, p.Refused.Code, p.Refused)
			}
			if p.ProducerID != "" || p.Sequence != 0 || p.Headers != nil || p.Payload != nil {
				t.Fatalf("refused publish %d keeps fields: %#v", p.Seq, p)
			}
			continue
		}
		hb := 0
		for _, h := range p.Headers {
			hb += len(h.Key) + len(h.Value)
			if len(h.Key) > lim.MaxString {
				t.Fatalf("publish %d: header key of %d bytes accepted", p.Seq, len(h.Key))
			}
		}
		if len(p.Topic) > lim.MaxTopic || len(p.ProducerID) > lim.MaxString || len(p.Payload) > lim.MaxPayload ||
			len(p.Headers) > lim.MaxHeaders || hb > lim.MaxHeaderBytes {
			t.Fatalf("publish %d over a limit accepted: topic %d, producer %d, payload %d, %d headers of %d bytes",
				p.Seq, len(p.Topic), len(p.ProducerID), len(p.Payload), len(p.Headers), hb)
		}
	}
}

// checkDecoderRun: the Decoder returns the records of a RECORDS or RUNS frame fr one by one,
// equal to what Decode returns for the whole frame (recs), and uses exactly the frame's bytes.
func checkDecoderRun(t *testing.T, fr Frame, recs []Record, lim Limits) {
	b := Append(nil, fr)
	d := NewDecoder(lim)
	used := 0
	for i := range recs {
		f, n, err := d.Decode(b[used:])
		if err != nil {
			t.Fatalf("Decoder, record %d of %d: %v", i, len(recs), err)
		}
		want := normalize(&recs[i])
		if got := normalize(f); !reflect.DeepEqual(got, want) {
			t.Fatalf("Decoder, record %d:\n%#v\n%#v", i, got, want)
		}
		used += n
	}
	if used != len(b) {
		t.Fatalf("Decoder used %d of %d bytes", used, len(b))
	}
}

// FuzzSplit: a valid frame sequence split into two writes at any byte decodes to the same
// frames as the whole.
func FuzzSplit(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		// Keep only the valid prefix of frames, so the property is about splitting.
		var frames []Frame
		var valid []byte
		for rest := data; len(rest) > 0; {
			fr, n, err := Decode(rest, Limits{})
			if err != nil {
				break
			}
			frames = append(frames, fr)
			valid = append(valid, rest[:n]...)
			rest = rest[n:]
		}
		if len(frames) == 0 {
			return
		}
		at := int(uint(len(data)) % uint(len(valid)+1))
		r := NewReader(io.MultiReader(bytes.NewReader(valid[:at]), bytes.NewReader(valid[at:])), Limits{})
		for i, want := range frames {
			got, err := r.Read()
			if err != nil {
				t.Fatalf("split at %d, frame %d: %v", at, i, err)
			}
			if !reflect.DeepEqual(normalize(got), normalize(want)) {
				t.Fatalf("split at %d, frame %d differs", at, i)
			}
		}
		if _, err := r.Read(); err != io.EOF {
			t.Fatalf("split at %d: trailing read %v", at, err)
		}
	})
}

// normalize maps empty byte slices to nil so that DeepEqual compares content only.
func normalize(f Frame) Frame {
	switch v := f.(type) {
	case *Watch:
		if len(v.Patterns) == 0 {
			return &Watch{}
		}
	case *Publish:
		c := *v
		c.Refused = nil // never encoded: a refused publish re-encodes as its Seq and Topic
		c.Payload = nilIfEmpty(c.Payload)
		c.Headers = normHeaders(c.Headers)
		return &c
	case *Record:
		c := *v
		c.Payload = nilIfEmpty(c.Payload)
		c.Headers = normHeaders(c.Headers)
		return &c
	case *PublishBatch:
		c := PublishBatch{Seq: v.Seq, Topic: v.Topic, Publishes: make([]Publish, len(v.Publishes))}
		for i := range v.Publishes {
			c.Publishes[i] = *normalize(&v.Publishes[i]).(*Publish)
		}
		return &c
	case *PublishMulti:
		c := PublishMulti{Seq: v.Seq, Publishes: make([]Publish, len(v.Publishes))}
		for i := range v.Publishes {
			c.Publishes[i] = *normalize(&v.Publishes[i]).(*Publish)
		}
		return &c
	case *Records:
		c := Records{Index: v.Index, Records: make([]Record, len(v.Records))}
		for i := range v.Records {
			c.Records[i] = *normalize(&v.Records[i]).(*Record)
		}
		return &c
	case *Runs:
		c := Runs{Records: make([]Record, len(v.Records))}
		for i := range v.Records {
			c.Records[i] = *normalize(&v.Records[i]).(*Record)
		}
		return &c
	}
	return f
}

func normHeaders(hs []Header) []Header {
	if len(hs) == 0 {
		return nil
	}
	out := make([]Header, len(hs))
	for i, h := range hs {
		out[i] = Header{Key: h.Key, Value: nilIfEmpty(h.Value)}
	}
	return out
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// recordsSeed is a RECORDS frame built by a Writer, then a RECORD it had to fall back to.
func recordsSeed() []byte {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	hs := []Header{{Key: "k", Value: []byte("v")}}
	w.BufferRecord(&Record{Index: 2, Offset: 7, Time: 100, OriginRegion: "eu", OriginOffset: 7, Payload: []byte("a")})
	w.BufferRecord(&Record{Index: 2, Offset: 8, Time: 100, OriginRegion: "eu", OriginOffset: 8, ProducerID: "p", Sequence: 3, Headers: hs, Payload: []byte("bc")})
	w.BufferRecord(&Record{Index: 2, Offset: 9, Time: 250, OriginRegion: "eu", OriginOffset: 40})
	w.Flush()
	return buf.Bytes()
}

// runsSeed is RUNS frames built by a Writer: runs of three topics (two bound in the frame),
// a continued run, a time going back across topics, a record with headers, then a record
// too large for a RUNS frame (a TOPIC and a RECORD) and a frame of another origin region.
func runsSeed() []byte {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	hs := []Header{{Key: "k", Value: []byte("v")}}
	w.BufferRun(&Record{Index: 0, Bind: "a.x", Offset: 0, Time: 100, OriginRegion: "eu", OriginOffset: 0, Payload: []byte("a")})
	w.BufferRun(&Record{Index: 0, Offset: 1, Time: 100, OriginRegion: "eu", OriginOffset: 1, Payload: []byte("b")})
	w.BufferRun(&Record{Index: 1, Bind: "a.y", Offset: 7, Time: 90, OriginRegion: "eu", OriginOffset: 3, ProducerID: "p", Sequence: 3, Headers: hs, Payload: []byte("cd")})
	w.BufferRun(&Record{Index: 0, Offset: 2, Time: 400, OriginRegion: "eu", OriginOffset: 9})
	w.BufferRun(&Record{Index: 2, Bind: "a.z", Offset: 0, Time: 5, OriginRegion: "eu", Payload: bytes.Repeat([]byte("z"), 32700)})
	w.BufferRun(&Record{Index: 1, Offset: 8, Time: 95, OriginRegion: "us", OriginOffset: 1 << 40})
	w.Flush()
	return buf.Bytes()
}

// publishBatchSeed is a stream of PUBLISH_BATCH frames as a client's Writer builds them (a
// topic change and a seq gap start new frames), then a PUBLISH_ACKS.
func publishMultiSeed() []byte {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	hs := []Header{{Key: "k", Value: []byte("v")}}
	w.BufferPublishMulti(&Publish{Seq: 1, Topic: "a.b", Payload: []byte("x")}, 1<<10)
	w.BufferPublishMulti(&Publish{Seq: 2, Topic: "a.c", ProducerID: "p", Sequence: 9, Headers: hs, Payload: []byte("yz")}, 1<<10)
	w.BufferPublishMulti(&Publish{Seq: 3, Topic: "a.c"}, 1<<10)
	w.BufferPublishMulti(&Publish{Seq: 4, Topic: "a.b", Payload: []byte("w")}, 1<<10)
	w.BufferPublishMulti(&Publish{Seq: 6, Topic: "a.d", Payload: []byte("v")}, 1<<10)
	w.Buffer(&PublishAcks{Seq: 1, Count: 4, Offset: 10, Time: 99})
	w.Flush()
	return buf.Bytes()
}

func publishBatchSeed() []byte {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	hs := []Header{{Key: "k", Value: []byte("v")}}
	w.BufferPublish(&Publish{Seq: 1, Topic: "a.b", Payload: []byte("x")}, 1<<10)
	w.BufferPublish(&Publish{Seq: 2, Topic: "a.b", ProducerID: "p", Sequence: 9, Headers: hs, Payload: []byte("yz")}, 1<<10)
	w.BufferPublish(&Publish{Seq: 3, Topic: "a.c"}, 1<<10)
	w.BufferPublish(&Publish{Seq: 5, Topic: "a.c", Payload: []byte("w")}, 1<<10)
	w.Buffer(&PublishAcks{Seq: 1, Count: 4, Offset: 10, Time: 99})
	w.Flush()
	return buf.Bytes()
}
