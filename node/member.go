package node

import (
	"cmp"
	"context"
	"errors"
	"io"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"
	"github.com/quicmq/quicmq/node/groups"
	"github.com/quicmq/quicmq/node/vector"
	"github.com/quicmq/quicmq/routing"
	"github.com/quicmq/quicmq/wal"
)

// member is one group member's subscription stream (node/groups). Its run goroutine takes
// records from the group when the stream has room and writes them (the only writer of the
// stream); its ack reader takes ACK, NAK and COMMIT frames. The stream's flow control
// blocks only the run goroutine's write: a member that stops reading takes no more records,
// and the ones it holds are delivered again to others when their ack-wait passes.
type member struct {
	groups.Member // the group's side of it, under the group's mutex
	s             *session
	view          *auth.Principal // whose names the dead-letter headers use: the client's (a relayed member's tenant)
	g             *groups.Group
	str           *quic.Stream
	ctx           context.Context
	cancel        context.CancelFunc

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
	refs  []wal.OriginRef // the origins of a batch's records as send read them, reused (groups.Group.Learned)
}

// serveMember serves a SUBSCRIBE naming a group (authorized and counted by subscribe).
func (s *session) serveMember(str *quic.Stream, r *wire.Reader, req *wire.Subscribe, refuse func(*wire.Error)) {
	n := s.n
	gr := req.Group
	want, e := s.memberSettings(req)
	if e != nil {
		refuse(e)
		return
	}
	if n.place != nil && !s.peer {
		home, e := n.groupHome(s.ctx, req.Pattern, s.actor.Durable(gr.Name))
		if e != nil {
			refuse(e)
			return
		}
		if home != n.cfg.Name {
			s.relayMember(str, r, req, want.DeadLetter, home, refuse) // grouprelay.go
			return
		}
	}
	if e := s.groupTopicsHere(gr.Name, req.Pattern, want.DeadLetter); e != nil {
		refuse(e)
		return
	}
	if e := n.checkNewGroup(s.groupActor(gr.Name), s.actor.Durable(gr.Name)); e != nil {
		refuse(e)
		return
	}
	if e := n.groupBarrier(s.ctx, s.actor.Durable(gr.Name), req.Pattern); e != nil { // grouprepl.go
		refuse(e)
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	m := &member{s: s, str: str, ctx: ctx, cancel: cancel, commitWake: make(chan struct{}, 1)}
	m.Member = groups.Member{
		ID: s.conn.RemoteAddr().String() + " stream " + strconv.FormatInt(int64(str.StreamID()), 10),
		End: func(e *wire.Error) {
			m.ackErr.CompareAndSwap(nil, e)
			m.cancel()
		},
	}
	m.w = wire.NewWriter(str)
	m.sweep = n.wal.NewSweep()
	m.view = s.groupActor(gr.Name)
	g, e := n.joinGroup(s.actor.Durable(gr.Name), m.view.ClientDurable(s.actor.Durable(gr.Name)), req, want, &m.Member)
	if e != nil {
		refuse(e)
		return
	}
	m.g = g
	if !s.track(m) {
		n.leaveGroup(g, &m.Member)
		refuse(wire.Errorf(wire.CodeShuttingDown, "node shutting down"))
		return
	}
	defer s.untrack(m)
	n.metrics.subscriptions.Inc()
	defer n.metrics.subscriptions.Dec()
	m.w.Buffer(&wire.Subscribed{})
	if m.w.Flush() != nil {
		n.leaveGroup(g, &m.Member)
		return
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
	n.leaveGroup(g, &m.Member) // after the last ACKs are taken: what is left is handed out again
	if e := m.ackErr.Load(); e != nil && err == nil {
		err = e
	}
	if err != nil {
		n.metrics.subscribeErrors.WithLabelValues(strconv.FormatUint(uint64(err.Code), 10)).Inc()
		m.str.SetWriteDeadline(time.Now().Add(endWriteTimeout))
		m.w.Buffer(&wire.ErrorFrame{Code: err.Code, Message: err.Message})
		m.w.Flush() // Write alone only buffers a small frame
	}
	m.str.Close()
}

// memberSettings checks a member's SUBSCRIBE (its group's name, no durable, no other
// region, its dead-letter topic) and returns the group settings it asks for.
func (s *session) memberSettings(req *wire.Subscribe) (wal.GroupSettings, *wire.Error) {
	n := s.n
	gr := req.Group
	// relayed by a node of the region (grouprelay.go): namespaced
	nameOK := func(name string) bool { return auth.ValidConsumerName(name, s.peer) }
	switch {
	case s.peer && s.peerRegion() != n.cfg.Region:
		return wal.GroupSettings{}, wire.Errorf(wire.CodeInvalidArgument, "group members are served in their own region; a group cannot be relayed from another region")
	case req.Durable != "" || (req.Region != "" && req.Region != n.cfg.Region):
		return wal.GroupSettings{}, wire.Errorf(wire.CodeInvalidArgument, "group %q: a group member names no durable consumer and no other region", gr.Name)
	case !nameOK(gr.Name):
		return wal.GroupSettings{}, wire.Errorf(wire.CodeInvalidArgument, "group name %q: want 1-255 characters of [A-Za-z0-9_.-]", gr.Name)
	}
	want := wal.GroupSettings{Pattern: req.Pattern, AckWait: gr.AckWait, MaxDeliver: gr.MaxDeliver, Order: gr.Order}
	if gr.DeadLetter == "" {
		return want, nil
	}
	if e := s.actor.CheckTopic(gr.DeadLetter, false); e != nil {
		return want, wire.Errorf(e.Code, "dead-letter topic: %s", e.Message)
	}
	want.DeadLetter = s.actor.Topic(gr.DeadLetter)
	if e := s.actor.MayPublish(gr.DeadLetter); e != nil { // the grant is in the client's names
		return want, wire.Errorf(e.Code, "dead-letter topic: %s", e.Message)
	}
	if routing.Match(req.Pattern, want.DeadLetter) {
		return want, wire.Errorf(wire.CodeInvalidArgument, "dead-letter topic %q matches the group's pattern: its records would come back to the group", gr.DeadLetter)
	}
	return want, nil
}

// groupTopicsHere refuses a group whose literal topics (its pattern's, its dead-letter
// topic) another node of a single-copy region owns: a group is served by its home, which
// must hold them.
func (s *session) groupTopicsHere(group, pattern, deadLetter string) *wire.Error {
	n := s.n
	if n.place == nil {
		return nil
	}
	for _, t := range []string{pattern, deadLetter} {
		switch {
		case t == "" || !routing.IsLiteral(t):
			continue
		case n.rep != nil && (t == deadLetter || n.rep.isReplicated(t)):
			// grouprepl.go: a replicated topic's group is served by its leader (groupHome
			// sent the member there), and dead-letter records go through raft.
			continue
		}
		o, e := n.place.Owner(s.ctx, t)
		if e != nil {
			return e
		}
		if o != n.cfg.Name {
			return wire.Errorf(wire.CodeUnavailable, "group %q: topic %q is owned by node %s of this region; a group is served by its home, which must hold its topics (the dead-letter topic too)",
				group, s.actor.ClientName(t), o)
		}
	}
	return nil
}

func (m *member) drain() {
	m.ackErr.CompareAndSwap(nil, wire.Errorf(wire.CodeShuttingDown, "node shutting down"))
	m.cancel()
	m.str.SetWriteDeadline(time.Now().Add(endWriteTimeout))
}

// run takes records from the group and writes them until the member ends. It returns an
// error to send, or nil.
func (m *member) run() *wire.Error {
	g, n := m.g, m.s.n
	// A write blocked on flow control gives up when the member ends.
	stop := context.AfterFunc(m.ctx, func() { m.str.SetWriteDeadline(time.Now().Add(endWriteTimeout)) })
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
		placed := n.placeChanged()          // before groupMoved: a leader change after it is not missed
		if e := n.groupMoved(g); e != nil { // grouprepl.go: its topic's leader serves it now
			return e
		}
		changed, due := g.WaitCh() // before take: a change after it is not missed
		got, dead := g.Take(&m.Member, n.cfg.Groups.MemberBatch)
		if len(dead) > 0 {
			if err := g.DeadLetter(m.ctx, dead, m.view.ClientName); err != nil {
				n.log.Error("group dead-letter failed", "group", g.Shown, "err", err)
				return wire.Errorf(wire.CodeInternal, "group %q: %v", g.Shown, err)
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
		case <-g.Wake:
			g.Poke() // the log advanced: every waiting member may take some
		case <-g.NewTopics:
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
func (m *member) send(fs []groups.Taken) *wire.Error {
	m.refs = slices.Grow(m.refs[:0], len(fs))[:len(fs)]
	clear(m.refs)
	e := m.sendRead(fs)
	if e == nil {
		m.g.Learned(fs, m.refs)
	}
	return e
}

// sendRead is send's reading and buffering, noting each record's origin in m.refs.
func (m *member) sendRead(fs []groups.Taken) *wire.Error {
	n := m.s.n
	slices.SortFunc(fs, func(a, b groups.Taken) int {
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
			m.w.Buffer(&wire.Topic{Index: idx, Name: m.s.actor.ClientName(topic)})
		}
		read := func(in wal.Instance) (int, error) {
			got, _, err := m.sweep.ReadFunc(in, from, j-i, 1<<30, func(rec *wal.Record) error {
				m.rec = recordFrame(idx, rec, n.cfg.Region)
				m.w.Buffer(&m.rec)
				if k := i + int(rec.Offset-from); rec.Offset >= from && k < j {
					m.refs[k] = wal.OriginRef{Region: vector.OriginOf(rec, n.cfg.Region), Offset: rec.OriginOffset}
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
			if now := n.wal.Instance(topic); now.Valid() && now != in {
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
		if m.w.Buffered() >= n.cfg.ReadAhead {
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
func (m *member) readAcks(r *wire.Reader) *wire.Error {
	g := m.g
	store := func() *wire.Error {
		if err := g.Store(context.WithoutCancel(m.ctx)); err != nil {
			var we *wire.Error // a replicated store that did not commit (grouprepl.go)
			if errors.As(err, &we) {
				return we
			}
			if errors.Is(err, wal.ErrClosed) {
				return wire.Errorf(wire.CodeShuttingDown, "node shutting down")
			}
			return wire.Errorf(wire.CodeInternal, "store group %q: %v", g.Shown, err)
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
func (m *member) acked(i, off uint64, nak bool) *wire.Error {
	what := "ACK"
	if nak {
		what = "NAK"
	}
	var err error
	if nak {
		err = m.g.NakAt(&m.Member, i, off)
	} else {
		err = m.g.AckAt(&m.Member, i, off)
	}
	if err != nil {
		return wire.Errorf(wire.CodeInvalidArgument, "%s of topic index %d offset %d: no such record was delivered on this stream", what, i, off)
	}
	return nil
}
