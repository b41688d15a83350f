package node

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/quicmq/quicmq/node/features"
	"github.com/quicmq/quicmq/replica"
	"github.com/quicmq/quicmq/routing"
)

// Raft groups hold many topics (replgroups.go).
//
// A replicated region keeps its topics in a set of raft groups whose number follows the
// region's size (RaftSettings.GroupsPerNode per node, rounded up to a multiple of the nodes
// so that leadership spreads evenly), never the number of topics: a group's cost (its
// ticks, heartbeats, elections, rounds and metrics) is shared by all its topics, and a new
// topic costs one line in a metadata entry that many creations share.
//
// The metadata leader declares groups and places topics on them in one record kind (a
// groups record, version 3 below): a group is a replica set (routing.Place over the
// region's nodes, balanced by the groups each holds) and a raft group ID; a topic is placed
// on a group of its replica count, chosen by its name's hash among the groups of that count
// that exist when it is placed, and never changes group except by an explicit move. Groups
// are added, never removed, when the region has grown past what its groups cover: topics
// placed before stay where they are, new ones spread over all.
//
// Regions formed before groups held many topics (placement records of version 1: one group
// per topic, named by replica.TopicGroup) keep their topics in their groups; their leader
// writes groups records once every node of the region announces in gossip that it reads
// metadata records of version 3 (node/features: meta=3), so a region upgraded one node at a
// time never has a node that skips a placement.

// groupsVersion is the metadata record that declares groups and places topics on them:
//
//	version u8 = 3 | group count | (group ID | replica count | (node name str | raft ID)...)...
//	              | topic count | (topic str | group ID)...
//
// (uvarints; str is uvarint length | bytes). Applied in log order: the first declaration of
// a group ID and the first placement of a topic win, and a placement names a group declared
// in this record or an earlier one.
const groupsVersion = 3

// maxGroupsRecordTopics bounds the topics one groups record places (about 30 bytes each).
const maxGroupsRecordTopics = 4096

// repGroup is a raft group of replicated topics as the metadata group declared it.
type repGroup struct {
	id       uint64
	replicas []repMember // preference order: boot[0] stands first when the group is new
	boot     []uint64
	local    bool // this node holds a replica
	// label names the group in metrics and logs: the topic of a group of one topic (a
	// region's layout before groups held many), or "g" and its ID.
	label string
	many  bool // declared by a groups record: holds many topics
}

func (g *repGroup) names() []string {
	out := make([]string, len(g.replicas))
	for i, m := range g.replicas {
		out[i] = m.name
	}
	return out
}

// groupsRecord is a decoded groups record.
type groupsRecord struct {
	groups []*repGroup
	topics []groupPlacement
}

type groupPlacement struct {
	topic string
	group uint64
}

func encodeGroups(rec *groupsRecord) []byte {
	b := []byte{groupsVersion}
	b = binary.AppendUvarint(b, uint64(len(rec.groups)))
	for _, g := range rec.groups {
		b = binary.AppendUvarint(b, g.id)
		b = binary.AppendUvarint(b, uint64(len(g.replicas)))
		for _, m := range g.replicas {
			b = binary.AppendUvarint(b, uint64(len(m.name)))
			b = append(b, m.name...)
			b = binary.AppendUvarint(b, m.id)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(rec.topics)))
	for _, p := range rec.topics {
		b = binary.AppendUvarint(b, uint64(len(p.topic)))
		b = append(b, p.topic...)
		b = binary.AppendUvarint(b, p.group)
	}
	return b
}

// decodeGroups decodes a groups record (its bytes come from raft entries: every length is
// checked).
func decodeGroups(p []byte) (*groupsRecord, error) {
	if len(p) == 0 || p[0] != groupsVersion {
		return nil, fmt.Errorf("%w: not a groups record", errPlacement)
	}
	// The topics' names are cut from one copy of the record: one allocation for the
	// record, not one per topic on every node (issue 29).
	d := &metaDecoder{p: p[1:], whole: string(p[1:])}
	rec := &groupsRecord{}
	ng := d.uv()
	if d.bad || ng > uint64(len(d.p)) {
		return nil, fmt.Errorf("%w: group count", errPlacement)
	}
	for range ng {
		g := &repGroup{id: d.uv(), many: true}
		count := d.uv()
		if d.bad || g.id <= metaGroup || count == 0 || count > maxPlacementReplicas {
			return nil, fmt.Errorf("%w: group ID or replica count", errPlacement)
		}
		for range count {
			m := repMember{name: d.str(), id: d.uv()}
			if d.bad || m.name == "" || m.id == 0 {
				return nil, fmt.Errorf("%w: replica of group %d", errPlacement, g.id)
			}
			g.replicas = append(g.replicas, m)
			g.boot = append(g.boot, m.id)
		}
		g.label = "g" + strconv.FormatUint(g.id, 10)
		rec.groups = append(rec.groups, g)
	}
	nt := d.uv()
	if d.bad || nt > uint64(len(d.p)) {
		return nil, fmt.Errorf("%w: topic count", errPlacement)
	}
	rec.topics = make([]groupPlacement, 0, nt)
	for range nt {
		pl := groupPlacement{topic: d.str(), group: d.uv()}
		if d.bad || pl.topic == "" || pl.group <= metaGroup {
			return nil, fmt.Errorf("%w: topic placement", errPlacement)
		}
		rec.topics = append(rec.topics, pl)
	}
	if len(d.p) > 0 {
		return nil, fmt.Errorf("%w: %d bytes after the end", errPlacement, len(d.p))
	}
	return rec, nil
}

// groupsPerNode is the setting's value with its default: two groups per core, at least 4;
// 0 when the region keeps one group per topic (a negative setting).
func groupsPerNode(setting int) int {
	switch {
	case setting < 0:
		return 0
	case setting > 0:
		return setting
	}
	return max(4, 2*runtime.NumCPU())
}

// manyGroups reports whether the metadata leader places new topics on groups of many
// topics: the setting allows it and every node of the region announces that it reads groups
// records (RegionKnows).
// The answer is kept for a second: every new topic asks.
func (r *replicated) manyGroups() bool {
	if groupsPerNode(r.n.cfg.Raft.GroupsPerNode) == 0 {
		return false
	}
	r.mu.Lock()
	if time.Since(r.mu.manyAt) < time.Second {
		defer r.mu.Unlock()
		return r.mu.many
	}
	r.mu.Unlock()
	many, _ := r.n.RegionKnows(features.Meta, groupsVersion)
	r.mu.Lock()
	r.mu.many, r.mu.manyAt = many, time.Now()
	r.mu.Unlock()
	return many
}

// placeReq is a topic waiting for the metadata leader's next groups record.
type placeReq struct {
	topic    string
	replicas int
}

// placeMany queues topic to be placed on a group by the placer goroutine, which writes
// every topic queued meanwhile in one metadata entry. The caller waits for the placement
// to be applied (ensureReplicas).
func (r *replicated) placeMany(topic string, replicas int) {
	r.mu.Lock()
	r.mu.placeQ = append(r.mu.placeQ, placeReq{topic, replicas})
	r.mu.Unlock()
	select {
	case r.placeWake <- struct{}{}:
	default:
	}
}

// placerInflight bounds the groups records the placer has proposed and not yet seen
// applied: topics queued while they commit go into the next one at once instead of waiting
// for the previous record's whole commit (a raft round trip and two fsyncs).
const placerInflight = 4

// placer is the goroutine that turns queued placements into groups records, so that the
// topics queued while records commit share the next. Up to placerInflight records are in
// flight; one that declares groups is proposed alone, after the ones before it applied, so
// that every record is decided knowing every group declared before it.
func (r *replicated) placer(ctx context.Context) {
	inflight := make(chan struct{}, placerInflight)
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.placeWake:
		}
		for ctx.Err() == nil {
			r.mu.Lock()
			queued := len(r.mu.placeQ) > 0
			r.mu.Unlock()
			if !queued {
				break
			}
			select { // a slot first, so that the record takes every topic queued until then
			case inflight <- struct{}{}:
			case <-ctx.Done():
				return
			}
			r.mu.Lock()
			q := r.mu.placeQ
			if len(q) > maxGroupsRecordTopics {
				q = q[:maxGroupsRecordTopics]
			}
			r.mu.placeQ = r.mu.placeQ[len(q):]
			if len(r.mu.placeQ) == 0 {
				r.mu.placeQ = nil
			}
			r.mu.Unlock()
			rec, err := r.groupsFor(q)
			if err == nil && len(rec.groups) > 0 && len(inflight) > 1 {
				// It declares groups: decided again once the records before it applied
				// (every other slot taken, then given back).
				for range placerInflight - 1 {
					select {
					case inflight <- struct{}{}:
					case <-ctx.Done():
						return
					}
				}
				for range placerInflight - 1 {
					<-inflight
				}
				rec, err = r.groupsFor(q)
			}
			if err != nil || len(rec.topics) == 0 {
				<-inflight
				if err != nil {
					r.n.log.Warn("placing topics on raft groups", "topics", len(q), "err", err)
				}
				continue // the askers time out and say so; a retry asks again
			}
			pctx, cancel := context.WithTimeout(ctx, r.n.cfg.Raft.QuorumTimeout)
			topics := len(rec.topics)
			declares := len(rec.groups) > 0
			proposed := make(chan struct{})
			r.d.ProposeAsync(pctx, metaGroup, encodeGroups(rec), func(_ replica.Result, err error) {
				cancel()
				if err != nil {
					r.n.log.Warn("placing topics on raft groups through the region's metadata group", "topics", topics, "err", err)
				}
				<-inflight
				close(proposed)
			})
			if declares {
				select { // the next record is decided knowing these groups
				case <-proposed:
				case <-ctx.Done():
					return
				}
			}
		}
	}
}

// groupsFor decides, on the metadata leader, the groups record that places reqs: each
// topic not placed yet goes to a group of its replica count, declaring new groups first
// where the region has fewer of that count than its size asks for.
func (r *replicated) groupsFor(reqs []placeReq) (*groupsRecord, error) {
	r.mu.Lock()
	members := append(slices.Clone(r.mu.voters), r.mu.learners...)
	r.mu.Unlock()
	ids := make(map[string]uint64)
	var eligible []routing.PlacementMember
	for _, m := range r.raftMembers() {
		if slices.Contains(members, m.id) {
			ids[m.name] = m.id
			eligible = append(eligible, routing.PlacementMember{ID: m.name, Eligible: m.alive && !r.reloc.Gone(m.name)}) // node/relocate
		}
	}
	if len(eligible) == 0 {
		return nil, fmt.Errorf("no node of the region is known with its raft ID")
	}
	rec := &groupsRecord{}
	r.pl.RLock()
	defer r.pl.RUnlock()
	byCount := map[int][]uint64{} // groups of many topics, by replica count, this record's included
	for k, gs := range r.pl.many {
		byCount[k] = slices.Clone(gs)
	}
	nextID := r.pl.nextID
	holdings := make(map[string][]string, len(r.pl.groups))
	leads := map[string]int{}
	for _, g := range r.pl.groups {
		if g.many {
			holdings[g.label] = g.names()
			leads[g.replicas[0].name]++
		}
	}
	perNode := groupsPerNode(r.n.cfg.Raft.GroupsPerNode)
	seen := map[string]bool{}
	for _, q := range reqs {
		if seen[q.topic] || r.pl.topics[q.topic] != 0 {
			continue
		}
		seen[q.topic] = true
		k := q.replicas
		if want := groupsWanted(perNode, len(eligible), k); len(byCount[k]) < want {
			for range want - len(byCount[k]) {
				for nextID <= metaGroup || r.pl.groups[nextID] != nil {
					nextID++
				}
				label := "g" + strconv.FormatUint(nextID, 10)
				p := routing.Place(eligible, holdings, []routing.PlacementRequest{{Topic: label, Replicas: k}})[0]
				if p.Err != nil {
					return nil, fmt.Errorf("a raft group of %d replicas: %v", k, p.Err)
				}
				names := p.Replicas
				// The replica that leads the fewest groups stands first, so that
				// leadership spreads over the region's nodes.
				best := 0
				for i, name := range names {
					if leads[name] < leads[names[best]] {
						best = i
					}
				}
				names = append([]string{names[best]}, append(slices.Clone(names[:best]), names[best+1:]...)...)
				g := &repGroup{id: nextID, label: label, many: true}
				for _, name := range names {
					g.replicas = append(g.replicas, repMember{name: name, id: ids[name]})
				}
				holdings[label] = names
				leads[names[0]]++
				rec.groups = append(rec.groups, g)
				byCount[k] = append(byCount[k], nextID)
				nextID++
			}
		}
		gs := byCount[k]
		rec.topics = append(rec.topics, groupPlacement{topic: q.topic, group: gs[topicHash(q.topic)%uint64(len(gs))]})
	}
	return rec, nil
}

// groupsWanted is how many groups of k replicas a region of nodes nodes keeps: perNode
// replicas per node, rounded up to a multiple of the nodes so that each leads as many.
func groupsWanted(perNode, nodes, k int) int {
	want := (perNode*nodes + k - 1) / k
	return (want + nodes - 1) / nodes * nodes
}

func topicHash(topic string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(topic))
	return h.Sum64()
}

// applyGroups applies a groups record: its new groups are declared (and opened where this
// node holds a replica), its topics placed, the first declaration and placement winning.
func (r *replicated) applyGroups(ctx context.Context, data []byte) {
	rec, err := decodeGroups(data)
	if err != nil {
		r.n.log.Error("a metadata record could not be decoded; it is skipped on every node alike", "err", err)
		return
	}
	var open []*repGroup
	for _, g := range rec.groups {
		r.nameReplicas(g)
		for _, m := range g.replicas {
			g.local = g.local || m.name == r.n.cfg.Name
		}
	}
	r.pl.Lock()
	for _, g := range rec.groups {
		if r.pl.groups[g.id] != nil {
			continue
		}
		r.declareLocked(g)
		if g.local {
			open = append(open, g)
		}
	}
	for _, p := range rec.topics {
		g := r.pl.groups[p.group]
		if g == nil {
			r.n.log.Error("a placement names a raft group the metadata never declared; it is skipped on every node alike", "topic", p.topic, "group", p.group)
			continue
		}
		r.placeLocked(p.topic, g)
	}
	r.pl.Unlock()
	for _, g := range open {
		r.openGroup(ctx, g)
	}
	placed := make([]string, len(rec.topics))
	for i, p := range rec.topics {
		placed[i] = p.topic
	}
	r.unparkPlaced(placed) // replpark.go
}

// nameReplicas records the names and raft IDs a placement gives g's replicas, and gives
// them the IDs the metadata named since (a member record that renamed a replica before the
// placement applied).
func (r *replicated) nameReplicas(g *repGroup) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, m := range g.replicas {
		if _, ok := r.mu.names[m.id]; !ok {
			r.mu.names[m.id] = m.name
		}
		if id, ok := r.mu.ids[m.name]; ok {
			g.replicas[i].id = id
		} else {
			r.mu.ids[m.name] = m.id
		}
	}
}

// declareLocked records g (r.pl held).
func (r *replicated) declareLocked(g *repGroup) {
	r.pl.groups[g.id] = g
	if g.many {
		r.pl.many[len(g.replicas)] = append(r.pl.many[len(g.replicas)], g.id)
		r.pl.nextID = max(r.pl.nextID, g.id+1)
	}
}

// placeLocked places topic on g unless it is placed already (r.pl held).
func (r *replicated) placeLocked(topic string, g *repGroup) bool {
	if _, ok := r.pl.topics[topic]; ok {
		return false
	}
	r.pl.topics[topic] = g.id
	if r.pl.changed != nil {
		close(r.pl.changed) // placeAll's asks look again (placementChanged)
		r.pl.changed = nil
	}
	if ch := r.pl.waiting[topic]; ch != nil {
		close(ch) // a creation waits for it (placedCh)
		delete(r.pl.waiting, topic)
	}
	if len(g.replicas) < r.n.cfg.Replicas {
		r.pl.narrow++ // placed with a count of its own (topics create --replicas)
	}
	return true
}

// openGroup opens g, a group this node holds a replica of: bootstrapped with the peers the
// metadata named, or joined empty when it was placed under this node's old raft ID. The
// preferred replica of a new group stands at once, so the group has a leader in a round
// trip rather than an election timeout; a group reopened after a restart does not (its
// leader is most likely alive and ahead).
func (r *replicated) openGroup(ctx context.Context, g *repGroup) {
	var created bool
	var err error
	if slices.Contains(g.boot, r.id) {
		created, err = r.d.OpenGroup(ctx, g.id, g.boot)
	} else {
		err = r.d.JoinGroup(ctx, g.id)
	}
	if err != nil {
		r.n.log.Error("could not open a raft group of replicated topics", "group", g.label, "err", err)
		return
	}
	if created && g.boot[0] == r.id {
		if err := r.d.Campaign(ctx, g.id); err != nil {
			r.n.log.Debug("campaign for a new raft group", "group", g.label, "err", err)
		}
	}
}

// groupOf is the state machine's map of topics to groups: the group the metadata placed
// topic on, or 0 while this node has not read its placement (the entry is then applied in
// the group it came in: every entry of a topic is proposed to the group of its placement).
func (r *replicated) groupOf(topic string) uint64 {
	r.pl.RLock()
	defer r.pl.RUnlock()
	return r.pl.topics[topic]
}
