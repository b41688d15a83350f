package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"
	"github.com/quicmq/quicmq/node/manage"
	"github.com/quicmq/quicmq/replica"
	"github.com/quicmq/quicmq/wal"
)

// Purge, retention and per-topic retention of replicated topics. Every replica must delete
// the same records, so each is an entry of the topic's group (replica.EntryTruncate,
// EntrySetConfig), proposed by its leader and applied on every replica:
//   - a purge, through any node, goes to the leader as a publish does (route); the leader
//     checks the dependents and proposes a cut below the next offset at apply;
//   - retention: the leader of each group this node holds computes the cut from its own
//     log (the topic's retention or the node's, by the log's clock, never past what it
//     applied) every retention interval and proposes it; a follower never decides one;
//   - a topic's own retention (topics create --retention-*, --update) is an entry that
//     stores the configuration on every replica, so a new leader enforces the same;
//   - a delete is a purge that also forgets the topic's positions, group states and
//     configuration (EntryForget); its placement in the metadata group stays, so the topic
//     is still listed (empty) and a later publish or create goes on at its next offset.

// removeReplicated purges or deletes a replicated topic of this region (node name stored)
// through its group's leader (manage.Local's RemoveReplicated). ok is false when the topic
// is not replicated here (a local topic of this node, kept from before replication): the
// caller handles it.
func (n *Node) removeReplicated(req manage.Request, stored string, f *wire.TopicRemove) (records uint64, ok bool, e *wire.Error) {
	r := n.rep
	relay := n.here.Manager(req).RelayRemove
	if !req.Peer {
		if v, outside, e := r.viaVoter(stored); outside {
			if e != nil {
				return 0, true, e
			}
			records, e := relay(v, stored, f)
			return records, true, e
		}
	}
	t := r.lookup(stored)
	if t == nil {
		if n.wal.IsLocal(stored) {
			return 0, false, nil
		}
		return 0, true, wire.Errorf(wire.CodeNotFound, "no topic %q in this region", req.A.ClientName(stored))
	}
	lead, e := r.route(req.Ctx, stored, req.Peer, req.From)
	if e != nil {
		return 0, true, e
	}
	if lead != "" {
		records, e := relay(lead, stored, f)
		return records, true, e
	}
	records, e = n.removeReplicatedHere(req.Ctx, req.A, t, f.Op == wire.RemoveDelete, f.Flags&wire.ManageForce != 0)
	return records, true, e
}

// removeReplicatedHere purges or deletes t on its leader (this node): refused while it has
// dependents unless forced, as for a local topic, then one entry of its group does it on
// every replica: a purge cuts every record below the next offset at apply; a delete
// (EntryForget) also removes the topic's positions, group states and configuration, and
// ends its subscriptions with CodeTopicDeleted. The topic stays placed: its offsets go on.
func (n *Node) removeReplicatedHere(ctx context.Context, a *auth.Principal, t *repTopic, del, force bool) (uint64, *wire.Error) {
	what := "purge"
	if del {
		what = "delete"
	}
	if e := n.here.CheckDependents(a, t.name, del, force); e != nil {
		return 0, e
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Raft.QuorumTimeout)
	defer cancel()
	var res replica.TruncateResult
	var err error
	if del {
		res, err = n.rep.sm.ProposeForget(ctx, n.rep.d, t.name)
	} else {
		res, err = n.rep.sm.ProposeTruncate(ctx, n.rep.d, t.name, 0, true)
	}
	if err != nil {
		return 0, n.rep.proposeErr(t, err, "did not "+what+" the topic")
	}
	n.here.Removed(t.name, del, res.Cut)
	n.log.Info("topic "+what+"d", "topic", t.name, "records", res.Cut-res.First, "first", res.Cut, "forced", force, "by", a.Name)
	return res.Cut - res.First, nil
}

// proposeErr maps the failure of an admin proposal to what the client is told.
func (r *replicated) proposeErr(t *repTopic, err error, what string) *wire.Error {
	if errors.Is(err, context.DeadlineExceeded) {
		return r.noQuorum(t, what)
	}
	var re *wal.ReplicatedError
	if errors.As(err, &re) || errors.Is(err, wal.ErrInvalidRequest) {
		return wire.Errorf(wire.CodeInvalidArgument, "%v", err)
	}
	e, _ := proposeError(t, err)
	return e
}

// configureReplicated stores a replicated topic's own retention (TOPIC_CREATE with
// ManageRetention or ManageUpdate) through its group's leader, and returns the topic's
// TOPIC_INFO (node names).
func (s *session) configureReplicated(ctx context.Context, topic string, f *wire.TopicCreate) (wire.TopicInfo, *wire.Error) {
	n, r := s.n, s.n.rep
	t := r.lookup(topic)
	if t == nil {
		return wire.TopicInfo{}, wire.Errorf(wire.CodeUnavailable, "topic %q is not placed yet; retry", topic)
	}
	lead, e := r.route(ctx, topic, s.peer, s.peerName)
	if e != nil {
		return wire.TopicInfo{}, e
	}
	if lead != "" {
		c := *f
		c.Topic = topic
		var ti wire.TopicInfo
		e := n.askNode(ctx, lead, &c, func(fr wire.Frame) error {
			got, ok := fr.(*wire.TopicInfo)
			if !ok {
				return fmt.Errorf("unexpected %s in the answer to TOPIC_CREATE", fr.Type())
			}
			ti = *got
			return nil
		})
		return ti, e
	}
	cfg := wal.TopicConfig{RetentionSet: f.Flags&wire.ManageRetention != 0}
	if cfg.RetentionSet {
		if f.MaxAge > 1<<63-1 || f.MaxBytes > 1<<63-1 {
			return wire.TopicInfo{}, wire.Errorf(wire.CodeInvalidArgument, "retention of topic %q: max age %d ns or max bytes %d out of range", f.Topic, f.MaxAge, f.MaxBytes)
		}
		cfg.Retention = wal.Retention{MaxAge: time.Duration(f.MaxAge), MaxBytes: int64(f.MaxBytes)}
	}
	// Placed, the topic exists (with the default configuration until an entry of its
	// group is applied here).
	cur, _ := n.wal.TopicConfig(topic)
	exists := true
	switch {
	case exists && cur == cfg:
	case exists && f.Flags&wire.ManageUpdate == 0:
		return wire.TopicInfo{}, wire.Errorf(wire.CodeInvalidArgument, "topic %q exists with another configuration (%s): update it with --update",
			s.actor.ClientName(topic), cur)
	default:
		pctx, cancel := context.WithTimeout(ctx, n.cfg.Raft.QuorumTimeout)
		defer cancel()
		res := r.sm.Propose(pctx, r.d, &replica.WalEntry{Kind: replica.EntrySetConfig, Topic: topic, Config: cfg})
		if res.Err != nil {
			return wire.TopicInfo{}, r.proposeErr(t, res.Err, "did not store the topic's configuration")
		}
		n.log.Info("topic configured", "topic", topic, "config", cfg.String(), "by", s.actor.Name)
	}
	return n.replTopicInfo(topic), nil
}

// replTopicInfo is a replicated topic's TOPIC_INFO as this node holds it (node names).
func (n *Node) replTopicInfo(topic string) wire.TopicInfo {
	ti := wire.TopicInfo{Name: topic}
	if info, ok := n.wal.TopicInfo(topic); ok {
		ti = manage.TopicInfo(info)
	}
	ti.Leader, ti.Replicas = n.rep.holders(topic)
	return ti
}

// retain runs retention for the replicated topics whose group this node leads, every
// retention interval, until ctx ends (one of start's goroutines).
func (r *replicated) retain(ctx context.Context) {
	every := r.n.wal.RetentionInterval()
	if every <= 0 {
		return
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		r.retainOnce(ctx)
	}
}

// retainOnce proposes, for each replicated topic of a group this node leads, the cut its
// retention asks for now.
func (r *replicated) retainOnce(ctx context.Context) {
	led := map[uint64]*repGroup{}
	for _, g := range r.localGroups() {
		st, err := r.d.Status(ctx, g.id)
		if err == nil && st.Lead == r.id && st.RaftState == raft.StateLeader {
			led[g.id] = g
		}
	}
	if len(led) == 0 {
		return
	}
	var topics []*repTopic
	r.pl.RLock()
	for name, id := range r.pl.topics {
		if g := led[id]; g != nil {
			topics = append(topics, &repTopic{name: name, group: id, replicas: g.replicas, boot: g.boot, local: true})
		}
	}
	r.pl.RUnlock()
	slices.SortFunc(topics, func(a, b *repTopic) int { return strings.Compare(a.name, b.name) })
	for _, t := range topics {
		if ctx.Err() != nil {
			return
		}
		if err := r.retainTopic(ctx, t); err != nil && ctx.Err() == nil {
			r.n.log.Warn("retention of a replicated topic failed: the next pass tries again", "topic", t.name, "err", err)
		}
	}
}

// retainTopic proposes t's retention cut when this node leads its group.
//
// It runs for every topic of the groups this node leads, every retention interval, idle or
// not: the leadership is read from the driver's role table, not asked of its goroutine (a
// round trip per topic woke an idle node's driver some 33,000 times per pass at 100,000 topics,
// a third of its idle CPU), and a topic without a cut due costs no context or timer.
func (r *replicated) retainTopic(ctx context.Context, t *repTopic) error {
	if ro, ok := r.d.Role(t.group); !ok || !ro.Leader || ro.Lead != r.id {
		return nil // not the leader (or not now): the leader decides cuts
	}
	cut, ok, err := r.n.wal.RetentionCut(t.name)
	if err != nil || !ok {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, r.n.cfg.Raft.QuorumTimeout)
	defer cancel()
	res, err := r.sm.ProposeTruncate(ctx, r.d, t.name, cut, false)
	if err != nil {
		return err
	}
	if res.Cut > res.First {
		r.n.log.Debug("replicated retention", "topic", t.name, "first", res.Cut, "deleted", res.Cut-res.First)
	}
	return nil
}
