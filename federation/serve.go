package federation

import (
	"context"
	"errors"
	"fmt"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/routing"
	"github.com/quicmq/quicmq/wal"
)

// ServeStream serves a stream a peer opened on a quicmq-peer/1 connection, whose first frame
// (WATCH or MIRROR) has been read. It returns when the stream ends. The node calls it on the
// stream's goroutine; the peer was authenticated by mutual TLS.
func (f *Federation) ServeStream(ctx context.Context, str *quic.Stream, r *wire.Reader, first wire.Frame) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	switch fr := first.(type) {
	case *wire.Watch:
		return f.serveCatalog(ctx, cancel, str, r, fr)
	case *wire.Mirror:
		if fr.Topic == sharedLinkMarker {
			return f.serveShared(ctx, cancel, str, r)
		}
		return f.serveMirror(ctx, cancel, str, r, fr)
	}
	return fmt.Errorf("federation: a peer stream cannot start with %s", first.Type())
}

// IsPeerFrame reports whether a stream starting with f is served by ServeStream.
func IsPeerFrame(f wire.Frame) bool {
	switch f.(type) {
	case *wire.Watch, *wire.Mirror:
		return true
	}
	return false
}

// serveCatalog announces every local topic matching the peer's patterns, now and as topics
// are created; a later WATCH replaces the patterns.
func (f *Federation) serveCatalog(ctx context.Context, cancel context.CancelFunc, str *quic.Stream, r *wire.Reader, first *wire.Watch) error {
	defer str.Close()
	updates := make(chan []string, 1)
	go func() { // the stream's reader: later WATCH frames, or the end of the stream
		defer cancel()
		for {
			fr, err := r.Read()
			if err != nil {
				return
			}
			w, ok := fr.(*wire.Watch)
			if !ok {
				return
			}
			select {
			case <-updates: // keep only the newest
			default:
			}
			updates <- w.Patterns
		}
	}()
	newTopics := make(chan struct{}, 1)
	stop := f.cfg.Log.NotifyNewTopics(newTopics)
	defer stop()

	patterns := validPatterns(first.Patterns)
	announced := make(map[string]bool)
	w := wire.NewWriter(str)
	synced := false
	for {
		for _, t := range f.cfg.Log.Topics() {
			if announced[t.Name] || !f.wanted(t.Name, patterns) {
				continue
			}
			announced[t.Name] = true
			w.Write(&wire.Topic{Name: t.Name})
		}
		if !synced {
			// Every topic held when the stream began is announced: the peer may now decide
			// that a topic it has not heard of is not held here.
			w.Write(&wire.Subscribed{})
			synced = true
		}
		if err := w.Flush(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-newTopics:
		case p := <-updates:
			patterns = validPatterns(p)
		}
	}
}

func validPatterns(ps []string) []string {
	out := ps[:0:0]
	for _, p := range ps {
		if routing.ValidatePattern(p) == nil {
			out = append(out, p)
		}
	}
	return out
}

// serveMirror streams the records of one topic that originated in this region, from origin
// offset From, then follows the log. Records this node mirrored from other regions are
// skipped: each region serves only its own records, so a full mesh has no loops. Writes block
// on the stream's flow control when the mirroring node is slow: nothing else waits.
func (f *Federation) serveMirror(ctx context.Context, cancel context.CancelFunc, str *quic.Stream, r *wire.Reader, req *wire.Mirror) error {
	w := wire.NewWriter(str)
	fail := func(e *wire.Error) error {
		w.Write(&wire.ErrorFrame{Code: e.Code, Message: e.Message})
		w.Flush()
		str.Close()
		return e
	}
	if err := routing.ValidateTopic(req.Topic); err != nil {
		return fail(&wire.Error{Code: wire.CodeInvalidTopic, Message: err.Error()})
	}
	go func() { // the peer sends nothing more; its end of the stream ends the mirror
		defer cancel()
		for {
			if _, err := r.Read(); err != nil {
				return
			}
		}
	}()
	stopWrites := context.AfterFunc(ctx, func() { str.CancelWrite(wire.AppCancelled) })
	defer stopWrites()
	wake := make(chan struct{}, 1)
	stop := f.cfg.Log.Notify(req.Topic, wake)
	defer stop()

	next := req.From
	for ctx.Err() == nil {
		got, after, scannedTime, err := f.bufferRecords(w, req.Topic, 0, next)
		next = after
		var oor *wal.OffsetOutOfRangeError
		switch {
		case err == nil, errors.Is(err, wal.ErrUnknownTopic):
		case errors.As(err, &oor):
			w.Buffer(&wire.Gap{From: next, To: oor.First})
			next = oor.First
			continue
		case errors.Is(err, wal.ErrClosed):
			return fail(wire.Errorf(wire.CodeShuttingDown, "node shutting down"))
		default:
			w.Flush() // the records before the failed one are good
			return fail(wire.Errorf(wire.CodeInternal, "read %q at %d: %v", req.Topic, next, err))
		}
		w.Buffer(f.head(req.Topic, next, scannedTime))
		if err := w.Flush(); err != nil {
			return err
		}
		if got > 0 {
			continue
		}
		select {
		case <-ctx.Done():
		case <-wake:
		}
	}
	str.Close()
	return nil
}

// head describes how far the scan position is behind the log's head.
func (f *Federation) head(topic string, position uint64, scannedTime int64) *wire.Head {
	_, next, _ := f.cfg.Log.Bounds(topic)
	h := &wire.Head{Next: next, Position: position}
	if position < next && scannedTime > 0 {
		if last, err := f.cfg.Log.Read(topic, next-1, 1, 0); err == nil && len(last) == 1 {
			h.Lag = max(last[0].Time-scannedTime, 0)
		}
	}
	return h
}

// bufferRecords encodes the next batch of topic's log from offset next straight from the
// log's memory into w's buffer (never blocking while the log's iterator is open), as RECORD
// frames with index (0 on a mirror stream of its own; the topic's number on the ablation's
// shared stream), skipping records mirrored here from other regions (their region serves
// them). It returns how many records it scanned, the offset after them and the time of the
// last, and ReadFunc's error.
func (f *Federation) bufferRecords(w *wire.Writer, topic string, index, next uint64) (got int, after uint64, scannedTime int64, err error) {
	after = next
	var out wire.Record // one value, reused: Buffer encodes it at once
	got, err = f.cfg.Log.ReadFunc(topic, next, 1024, 256<<10, func(rec *wal.Record) error {
		after, scannedTime = rec.Offset+1, rec.Time
		if rec.OriginRegion != "" {
			return nil
		}
		out = wire.Record{
			Index: index, Offset: rec.Offset, Time: rec.Time,
			OriginRegion: f.cfg.Region, OriginOffset: rec.Offset,
			ProducerID: rec.ProducerID, Sequence: rec.Sequence,
			Headers: rec.Headers, Payload: rec.Payload,
		}
		w.Buffer(&out)
		return nil
	})
	return got, after, scannedTime, err
}
