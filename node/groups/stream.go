package groups

import (
	"cmp"
	"context"
	"errors"
	"io"
	"slices"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"
	"github.com/quicmq/quicmq/node/tail"
	"github.com/quicmq/quicmq/node/vector"
	"github.com/quicmq/quicmq/wal"
)

// EndWriteTimeout bounds the write of a member's last frames (its ERROR) to a client that
// does not read, and a write once the member ends.
const EndWriteTimeout = time.Second

// Stream is one group member's subscription stream. Its run goroutine (Serve's caller)
// takes records from the group when the stream has room and writes them (the only writer
// of the stream); its ack reader (a goroutine Serve starts and waits for) takes ACK, NAK
// and COMMIT frames. The stream's flow control blocks only the run goroutine's write: a
// member that stops reading takes no more records, and the ones it holds are delivered
// again to others when their ack-wait passes.
type Stream struct {
	member Member // the group's side of it: only the group's methods touch it
	g      *Group
	str    *quic.Stream
	actor  *auth.Principal // whose names the TOPIC frames show: the session's
	view   *auth.Principal // whose names the dead-letter headers use: the client's (a relayed member's tenant)
	ctx    context.Context
	cancel context.CancelFunc

	// Written by the ack reader, read by the run goroutine.
	commitAsked atomic.Uint64 // the highest COMMIT whose ACKs are stored
	commitWake  chan struct{} // capacity 1: a COMMITTED is due
	ackErr      atomic.Pointer[wire.Error]

	// Owned by the run goroutine.
	w         *wire.Writer
	rec       wire.Record
	committed uint64 // the highest COMMITTED written
	// sweep reads the records the member takes, many topics with one Pebble iterator
	// (wal.Sweep): a wildcard group's batch is a record of each of many topics. Released
	// before every write that may wait on flow control and when the member waits.
	sweep *wal.Sweep
	refs  []wal.OriginRef // the origins of a batch's records as send read them, reused (Group.Learned)
}

// NewStream makes the member stream str of a node whose groups share env, its context a
// child of parent; id names it in dead-letter headers, actor is the session's principal
// (the TOPIC frames' names), view whose names the dead-letter headers use. Its Member
// joins a group (node.joinGroup) before Serve.
func NewStream(env *Env, parent context.Context, str *quic.Stream, id string, actor, view *auth.Principal) *Stream {
	ctx, cancel := context.WithCancel(parent)
	m := &Stream{str: str, actor: actor, view: view, ctx: ctx, cancel: cancel, commitWake: make(chan struct{}, 1)}
	m.member = Member{
		id: id,
		end: func(e *wire.Error) {
			m.ackErr.CompareAndSwap(nil, e)
			m.cancel()
		},
	}
	m.w = wire.NewWriter(str)
	m.sweep = env.Wal.NewSweep()
	return m
}

// Serve answers SUBSCRIBED and serves the member of g, reading its ACKs from r, until the
// client's FIN, an error or a drain ends it. It returns the error to send (End), or nil;
// false if the client was gone before SUBSCRIBED. The caller then leaves the group: what
// the member still holds is handed out again.
func (m *Stream) Serve(g *Group, r *wire.Reader) (*wire.Error, bool) {
	m.g = g
	m.w.Buffer(&wire.Subscribed{})
	if m.w.Flush() != nil {
		return nil, false
	}
	ackDone := make(chan struct{})
	go func() {
		defer close(ackDone)
		defer m.cancel() // the client's FIN ends the member, after its ACKs are stored
		if e := m.readAcks(r); e != nil {
			m.ackErr.Store(e)
		}
	}()
	err := m.run()
	m.str.CancelRead(wire.AppCancelled)
	<-ackDone
	if e := m.ackErr.Load(); e != nil && err == nil {
		err = e
	}
	return err, true
}

// Member is the group's side of the stream, which node.joinGroup adds to its group.
func (m *Stream) Member() *Member { return &m.member }

// Close lets go of the stream's context: for a member that never served (its group refused
// it). Safe after Serve, and twice.
func (m *Stream) Close() { m.cancel() }

// End ends the stream: ERROR e (if not nil), then FIN.
func (m *Stream) End(e *wire.Error) {
	if e != nil {
		m.str.SetWriteDeadline(time.Now().Add(EndWriteTimeout))
		m.w.Buffer(&wire.ErrorFrame{Code: e.Code, Message: e.Message})
		m.w.Flush() // Write alone only buffers a small frame
	}
	m.str.Close()
}

// Drain ends the member as the node shuts down. Any goroutine.
func (m *Stream) Drain() {
	m.ackErr.CompareAndSwap(nil, wire.Errorf(wire.CodeShuttingDown, "node shutting down"))
	m.cancel()
	m.str.SetWriteDeadline(time.Now().Add(EndWriteTimeout))
}

// run takes records from the group and writes them until the member ends. It returns an
// error to send, or nil.
func (m *Stream) run() *wire.Error {
	g, env := m.g, m.g.env
	// A write blocked on flow control gives up when the member ends.
	stop := context.AfterFunc(m.ctx, func() { m.str.SetWriteDeadline(time.Now().Add(EndWriteTimeout)) })
	defer stop()
	var timer *time.Timer
	defer func() {
		m.sweep.Release()
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if m.ctx.Err() != nil {
			return nil
		}
		placed := env.Where.Placed()           // before Moved: a leader change after it is not missed
		if e := env.Where.Moved(g); e != nil { // Replicated: its topic's leader serves it now
			return e
		}
		changed, due := g.WaitCh() // before take: a change after it is not missed
		got, dead := g.Take(&m.member, env.Cfg.MemberBatch)
		if len(dead) > 0 {
			if err := g.DeadLetter(m.ctx, dead, m.view.ClientName); err != nil {
				env.Log.Error("group dead-letter failed", "group", g.shown, "err", err)
				return wire.Errorf(wire.CodeInternal, "group %q: %v", g.shown, err)
			}
		}
		if len(got) > 0 {
			if err := m.send(got); err != nil {
				return err
			}
		}
		if m.commitAsked.Load() > m.committed {
			m.committed = m.commitAsked.Load()
			m.w.Buffer(&wire.Committed{Seq: m.committed})
		}
		m.sweep.Release() // before a write that may wait on flow control, or the wait below
		if m.w.Buffered() > 0 {
			if m.w.Flush() != nil {
				return nil // the client is gone or reset the stream
			}
		}
		if len(got) > 0 || len(dead) > 0 {
			continue
		}
		var tick <-chan time.Time
		if !due.IsZero() {
			d := time.Until(due)
			if timer == nil {
				timer = time.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			tick = timer.C
		}
		select {
		case <-m.ctx.Done():
			return nil
		case <-changed:
		case <-placed:
		case <-tick:
		case <-m.commitWake:
		case <-g.wake:
			g.Poke() // the log advanced: every waiting member may take some
		case <-g.newTopics:
			g.RefreshTopics()
			g.Poke()
		}
		if timer != nil && tick != nil && !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// send reads the records of fs from the log (in runs of consecutive offsets, in the order
// of their keys: topic ID, offset, with the member's Sweep) and buffers their frames,
// flushing every ReadAhead bytes; a topic's TOPIC frame goes before its first record (the
// group bound its index: groups.Taken). It tells the group the origins it read (Learned):
// the group's store needs no second read of them for its vector.
func (m *Stream) send(fs []Taken) *wire.Error {
	m.refs = slices.Grow(m.refs[:0], len(fs))[:len(fs)]
	clear(m.refs)
	e := m.sendRead(fs)
	if e == nil {
		m.g.Learned(fs, m.refs)
	}
	return e
}

// sendRead is send's reading and buffering, noting each record's origin in m.refs.
func (m *Stream) sendRead(fs []Taken) *wire.Error {
	env := m.g.env
	slices.SortFunc(fs, func(a, b Taken) int {
		if a.Index == b.Index {
			return cmp.Compare(a.Offset(), b.Offset())
		}
		return cmp.Or(cmp.Compare(a.Instance().ID(), b.Instance().ID()), cmp.Compare(a.Index, b.Index))
	})
	for i := 0; i < len(fs); {
		j := i + 1
		for j < len(fs) && fs[j].Index == fs[i].Index && fs[j].Offset() == fs[j-1].Offset()+1 {
			j++
		}
		topic, from, idx := fs[i].Topic(), fs[i].Offset(), fs[i].Index
		if fs[i].Bind {
			m.w.Buffer(&wire.Topic{Index: idx, Name: m.actor.ClientName(topic)})
		}
		read := func(in wal.Instance) (int, error) {
			got, _, err := m.sweep.ReadFunc(in, from, j-i, 1<<30, func(rec *wal.Record) error {
				m.rec = tail.Frame(idx, rec, env.Region)
				m.w.Buffer(&m.rec)
				if k := i + int(rec.Offset-from); rec.Offset >= from && k < j {
					m.refs[k] = wal.OriginRef{Region: vector.OriginOf(rec, env.Region), Offset: rec.OriginOffset}
				}
				return nil
			})
			return got, err
		}
		in := fs[i].Instance()
		got, err := read(in)
		if errors.Is(err, wal.ErrTopicDeleted) || errors.Is(err, wal.ErrUnknownTopic) {
			// The log it was handed out from is gone: read the log of its name now, if
			// another, as a lookup by name at this read would.
			if now := env.Wal.Instance(topic); now.Valid() && now != in {
				got, err = read(now)
			}
		}
		oor, isOOR := errors.AsType[*wal.OffsetOutOfRangeError](err)
		switch {
		case err == nil || errors.Is(err, wal.ErrUnknownTopic) || errors.Is(err, wal.ErrTopicDeleted):
			// A deleted topic's records are gone: the group forgets them (dropTopic).
		case isOOR:
			// Deleted by retention before it was delivered: nothing to deliver or redeliver.
			for _, f := range fs[i+got : j] {
				if f.Offset() < oor.First {
					m.g.Ack(nil, topic, f.Offset())
				}
			}
		case errors.Is(err, wal.ErrClosed):
			return wire.Errorf(wire.CodeShuttingDown, "node shutting down")
		default:
			return wire.Errorf(wire.CodeInternal, "read %q at offset %d: %v", topic, from, err)
		}
		if m.w.Buffered() >= env.ReadAhead {
			m.sweep.Release()
			if m.w.Flush() != nil {
				return nil
			}
		}
		i = j
	}
	return nil
}

// readAcks is the member's ack reader: ACK marks one record done, NAK gives one back,
// COMMIT stores the group's state and has the run goroutine answer COMMITTED. The group's
// state is stored whenever no further frame is buffered, and at the client's FIN, before
// the member ends.
func (m *Stream) readAcks(r *wire.Reader) *wire.Error {
	g := m.g
	store := func() *wire.Error {
		if err := g.Store(context.WithoutCancel(m.ctx)); err != nil {
			var we *wire.Error // a replicated store that did not commit (Replicated, where.go)
			if errors.As(err, &we) {
				return we
			}
			if errors.Is(err, wal.ErrClosed) {
				return wire.Errorf(wire.CodeShuttingDown, "node shutting down")
			}
			return wire.Errorf(wire.CodeInternal, "store group %q: %v", g.shown, err)
		}
		return nil
	}
	for {
		f, err := r.Read()
		switch {
		case errors.Is(err, wire.ErrMalformed), errors.Is(err, wire.ErrFrameTooLarge), errors.Is(err, io.ErrUnexpectedEOF):
			return &wire.Error{Code: wire.CodeProtocol, Message: err.Error()}
		case err != nil:
			return store()
		}
		switch f := f.(type) {
		case *wire.Ack:
			if e := m.acked(f.Index, f.Offset, false); e != nil {
				return e
			}
		case *wire.Nak:
			if e := m.acked(f.Index, f.Offset, true); e != nil {
				return e
			}
		case *wire.Commit:
			if e := store(); e != nil {
				return e
			}
			m.commitAsked.Store(max(m.commitAsked.Load(), f.Seq))
			select {
			case m.commitWake <- struct{}{}:
			default:
			}
			continue
		default:
			return wire.Errorf(wire.CodeProtocol, "unexpected %s on a group member's stream: only ACK, NAK and COMMIT may follow SUBSCRIBE", f.Type())
		}
		if !r.FrameBuffered() {
			if e := store(); e != nil {
				return e
			}
		}
	}
}

// acked applies the member's ACK (or NAK) of index i at off.
func (m *Stream) acked(i, off uint64, nak bool) *wire.Error {
	what := "ACK"
	if nak {
		what = "NAK"
	}
	var err error
	if nak {
		err = m.g.NakAt(&m.member, i, off)
	} else {
		err = m.g.AckAt(&m.member, i, off)
	}
	if err != nil {
		return wire.Errorf(wire.CodeInvalidArgument, "%s of topic index %d offset %d: no such record was delivered on this stream", what, i, off)
	}
	return nil
}
