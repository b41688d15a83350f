package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
)

// Creating topics on a node that does not lead the region's metadata group.
//
// A publish to a topic the region has never seen waits for the metadata leader to place it
// (ensureReplicas). A node that does not lead the metadata group asks its leader; one stream
// per topic cost a QUIC stream, a reader and a waiting goroutine with a poll timer on both
// nodes for every new topic, which held a region of three to a tenth of a single node's
// creation rate (issue 29). So the asks are batched: the asker goroutine takes every topic
// queued while earlier asks were answered and sends them, up to maxAskBatch, as the
// TOPIC_CREATE frames of one peer stream (up to askInflight streams at once); the leader
// queues them all for its placer (one groups record for many topics, replgroups.go) and
// answers each with its TOPIC_INFO once placed. An ask that asks for a replica count of its
// own (topics create --replicas) goes alone, so that a count the region cannot give is
// refused to its asker only.
//
// A leader of an older build reads only the first frame of a stream and answers it: the
// topics it did not answer are asked again (Unavailable), one more per round, until their
// timeout.

// maxAskBatch bounds the topics one ask stream carries (about 30 bytes each).
const maxAskBatch = 4096

// askInflight bounds the ask streams open at once: topics queued meanwhile go in the next.
const askInflight = 4

// askReq is one ensureReplicas waiting for the metadata leader (raft ID lead) to place
// topic. done (capacity 1) receives the leader's answer: nil once it placed the topic.
type askReq struct {
	lead  uint64
	topic string
	done  chan *wire.Error
	then  func(*wire.Error) // instead of done: called with the answer (a parked topic)
}

// answer gives a its answer.
func (a *askReq) answer(e *wire.Error) {
	if a.then != nil {
		a.then(e)
		return
	}
	a.done <- e
}

// askBatched queues topic to be asked of the metadata leader lead by the asker goroutine
// and returns the channel its answer comes on.
func (r *replicated) askBatched(lead uint64, topic string) <-chan *wire.Error {
	q := &askReq{lead: lead, topic: topic, done: make(chan *wire.Error, 1)}
	r.queueAsk(q)
	return q.done
}

// askBatchedThen is askBatched calling then with the answer, on the goroutine that has it
// (replpark.go).
func (r *replicated) askBatchedThen(lead uint64, topic string, then func(*wire.Error)) {
	r.queueAsk(&askReq{lead: lead, topic: topic, then: then})
}

func (r *replicated) queueAsk(q *askReq) {
	r.ask.Lock()
	r.ask.q = append(r.ask.q, q)
	r.ask.Unlock()
	select {
	case r.ask.wake <- struct{}{}:
	default:
	}
}

// asker is the goroutine that sends queued asks to the metadata leader, many per stream.
// Its streams run on goroutines it waits for before returning.
func (r *replicated) asker(ctx context.Context) {
	var streams sync.WaitGroup
	defer streams.Wait()
	inflight := make(chan struct{}, askInflight)
	for {
		select {
		case <-ctx.Done():
			r.failAsks(ctx.Err())
			return
		case <-r.ask.wake:
		}
		for ctx.Err() == nil {
			select { // a slot first, so that the stream takes every ask queued until then
			case inflight <- struct{}{}:
			case <-ctx.Done():
				r.failAsks(ctx.Err())
				return
			}
			batch := r.takeAsks()
			if len(batch) == 0 {
				<-inflight
				break
			}
			streams.Go(func() {
				defer func() { <-inflight }()
				r.sendAsks(ctx, batch)
			})
		}
	}
}

// takeAsks takes up to maxAskBatch queued asks of the leader the first one asks.
func (r *replicated) takeAsks() []*askReq {
	r.ask.Lock()
	defer r.ask.Unlock()
	if len(r.ask.q) == 0 {
		return nil
	}
	lead := r.ask.q[0].lead
	var batch, rest []*askReq
	for _, q := range r.ask.q {
		if q.lead == lead && len(batch) < maxAskBatch {
			batch = append(batch, q)
		} else {
			rest = append(rest, q)
		}
	}
	r.ask.q = rest
	return batch
}

// failAsks answers every queued ask with err (the node stops).
func (r *replicated) failAsks(err error) {
	r.ask.Lock()
	q := r.ask.q
	r.ask.q = nil
	r.ask.Unlock()
	for _, a := range q {
		a.answer(wire.Errorf(wire.CodeUnavailable, "topic %q: %v", a.topic, err))
	}
}

// sendAsks asks the metadata leader to place batch's topics over one peer stream and
// answers each ask: nil when the leader answered its topic, else the stream's error.
func (r *replicated) sendAsks(ctx context.Context, batch []*askReq) {
	n := r.n
	lead := batch[0].lead
	name := r.memberName(lead)
	answered := make(map[string]bool, len(batch))
	var err error
	if name == "" {
		err = fmt.Errorf("raft ID %d is not known in gossip yet", lead)
	} else {
		actx, cancel := context.WithTimeout(ctx, n.cfg.Raft.QuorumTimeout)
		err = r.streamAsks(actx, name, batch, func(ti *wire.TopicInfo) { answered[ti.Name] = true })
		cancel()
	}
	var we *wire.Error
	for _, a := range batch {
		switch {
		case answered[a.topic]:
			a.answer(nil)
		case errors.As(err, &we) && we.Code == wire.CodeInvalidArgument:
			a.answer(we) // the region cannot give its replica count: as the leader said it
		case err == nil:
			a.answer(wire.Errorf(wire.CodeUnavailable, "topic %q: the leader of region %q's metadata, node %q, did not answer for it; retry", a.topic, n.cfg.Region, name))
		default:
			a.answer(wire.Errorf(wire.CodeUnavailable, "topic %q: the leader of region %q's metadata, node %q, did not place it: %v", a.topic, n.cfg.Region, name, err))
		}
	}
}

// streamAsks writes one TOPIC_CREATE per ask on a peer stream to node and calls fn with
// each TOPIC_INFO answered, until the leader ends the stream.
func (r *replicated) streamAsks(ctx context.Context, node string, batch []*askReq, fn func(*wire.TopicInfo)) error {
	var req []byte
	for _, a := range batch {
		req = wire.Append(req, &wire.TopicCreate{Topic: a.topic})
	}
	str, err := r.n.fed.OpenStreamTo(ctx, node)
	if err != nil {
		return err
	}
	defer str.CancelRead(wire.AppCancelled)
	stop := context.AfterFunc(ctx, func() { str.CancelRead(wire.AppCancelled) })
	defer stop()
	if _, err := str.Write(req); err != nil {
		return err
	}
	str.Close()
	rd := wire.NewReader(str, wire.Limits{})
	for {
		f, err := rd.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch f := f.(type) {
		case *wire.ErrorFrame:
			return f.AsError()
		case *wire.TopicInfo:
			fn(f)
		default:
			return fmt.Errorf("unexpected %s", f.Type())
		}
	}
}

// servePlaceBatch answers another node's ask stream (streamAsks) on the metadata leader:
// first and every TOPIC_CREATE after it on the stream are placed together, then each is
// answered with its TOPIC_INFO; the first refusal ends the stream with its error.
func (s *session) servePlaceBatch(str *quic.Stream, rd *wire.Reader, first *wire.TopicCreate) {
	n := s.n
	topics := []string{first.Topic}
	for len(topics) < maxAskBatch {
		f, err := rd.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			s.streamError(str, err)
			return
		}
		tc, ok := f.(*wire.TopicCreate)
		if !ok || tc.Flags != 0 || tc.Replicas != 0 {
			s.failStream(str, wire.Errorf(wire.CodeInvalidArgument, "a batch of topics to place carries TOPIC_CREATE frames without options, not %s", f.Type()))
			return
		}
		topics = append(topics, tc.Topic)
	}
	ctx, cancel := context.WithTimeout(s.ctx, n.cfg.ManageTimeout)
	defer cancel()
	done := make(chan *wire.Error, len(topics))
	if e, ok := n.rep.placeAll(ctx, topics); ok {
		done <- e
	} else {
		// Not the common case (this node does not lead the metadata group, or places a
		// group per topic): each topic as a single ask is served.
		var wg sync.WaitGroup
		for _, topic := range topics {
			wg.Go(func() {
				_, e := n.rep.ensureReplicas(ctx, topic, true, 0)
				done <- e
			})
		}
		wg.Wait()
	}
	close(done)
	w := wire.NewWriter(str)
	for _, topic := range topics {
		if !n.rep.placed(topic) {
			continue
		}
		ti := n.rep.placedInfo(topic)
		if w.Write(topicInfoFor(s.version, &ti)) != nil {
			return
		}
	}
	for e := range done {
		if e != nil {
			s.failStream(str, e)
			return
		}
	}
	if w.Flush() == nil {
		str.Close()
	}
}

// placedCh returns a channel closed once topic is placed here (closed already if it is), so
// that a creation waits for its own placement, not for every metadata record applied.
func (r *replicated) placedCh(topic string) <-chan struct{} {
	r.pl.Lock()
	defer r.pl.Unlock()
	if _, ok := r.pl.topics[topic]; ok {
		return closedCh
	}
	if r.pl.waiting == nil {
		r.pl.waiting = map[string]chan struct{}{}
	}
	ch := r.pl.waiting[topic]
	if ch == nil {
		ch = make(chan struct{})
		r.pl.waiting[topic] = ch
	}
	return ch
}

// unwaitPlaced forgets topic's placement channel (its waiter gave up); a later waiter makes
// another.
func (r *replicated) unwaitPlaced(topic string) {
	r.pl.Lock()
	defer r.pl.Unlock()
	delete(r.pl.waiting, topic)
}

var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// placementChanged is nil when topic is placed, else a channel closed by the next
// placement of any topic. placeAll waits on it for a whole batch of topics: a channel and
// a waiting entry per topic, made and dropped on the metadata leader for every creation
// asked of it, were most of what its asks allocated besides their answers (issue 29).
func (r *replicated) placementChanged(topic string) <-chan struct{} {
	r.pl.Lock()
	defer r.pl.Unlock()
	if _, ok := r.pl.topics[topic]; ok {
		return nil
	}
	if r.pl.changed == nil {
		r.pl.changed = make(chan struct{})
	}
	return r.pl.changed
}

// slowPoll is how often a creation that asked for its placement looks again whether the
// metadata leader changed under it: an election takes that long.
func (r *replicated) slowPoll() time.Duration {
	c := r.n.cfg.Raft
	return max(c.TickInterval, c.TickInterval*time.Duration(c.ElectionTicks)/2)
}

// placeAll places topics, asked by another node, on this node, the metadata leader, placing
// on groups of many topics: queued for the placer together, then waited for together, with
// one timer and one channel (placementChanged), not a goroutine, timers or a channel per
// topic. ok is false when this node cannot take
// that path (it does not lead the metadata group, or places a group per topic).
func (r *replicated) placeAll(ctx context.Context, topics []string) (e *wire.Error, ok bool) {
	r.mu.Lock()
	formed := r.mu.formed
	members := len(r.mu.voters) + len(r.mu.learners)
	r.mu.Unlock()
	if !formed || r.leaderID(ctx, metaGroup) != r.id || !r.manyGroups() {
		return nil, false
	}
	n := r.n
	if n.cfg.Replicas > members {
		return wire.Errorf(wire.CodeInvalidArgument, "topic %q: %d replicas asked, but region %q has %d nodes that hold replicated topics", topics[0], n.cfg.Replicas, n.cfg.Region, members), true
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Raft.QuorumTimeout)
	defer cancel()
	var q []placeReq
	for _, topic := range topics {
		if !r.placed(topic) {
			q = append(q, placeReq{topic, n.cfg.Replicas})
		}
	}
	r.mu.Lock()
	r.mu.placeQ = append(r.mu.placeQ, q...)
	r.mu.Unlock()
	select {
	case r.placeWake <- struct{}{}:
	default:
	}
	poll := time.NewTicker(r.slowPoll())
	defer poll.Stop()
	for _, topic := range topics {
		for {
			changed := r.placementChanged(topic)
			if changed == nil {
				break
			}
			select {
			case <-changed:
			case <-poll.C:
				if r.leaderID(ctx, metaGroup) != r.id {
					return wire.Errorf(wire.CodeUnavailable, "topic %q: node %q no longer leads region %q's metadata; retry", topic, n.cfg.Name, n.cfg.Region), true
				}
			case <-ctx.Done():
				return wire.Errorf(wire.CodeUnavailable, "topic %q: region %q's metadata group did not place it within %v (no quorum of its nodes: %s); retry",
					topic, n.cfg.Region, n.cfg.Raft.QuorumTimeout, r.metaLacking()), true
			}
		}
	}
	return nil, true
}

// placedInfo is the TOPIC_INFO answering a batched ask: the topic's name, replicas and
// leader as this node knows them without asking the driver (replTopicInfo asks its
// goroutine for the group's status: one round trip per topic, behind the round's fsync,
// held up an answer of thousands of topics).
func (r *replicated) placedInfo(topic string) wire.TopicInfo {
	ti := wire.TopicInfo{Name: topic}
	t := r.lookup(topic)
	if t == nil {
		return ti
	}
	ti.Replicas = t.names()
	if ro, ok := r.d.Role(t.group); ok && ro.Lead != 0 {
		ti.Leader = t.nameOf(ro.Lead)
	} else {
		ti.Leader = r.leaderName(topic)
	}
	return ti
}
