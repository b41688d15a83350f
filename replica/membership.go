package replica

import (
	"fmt"
	"slices"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// Membership is a group's configuration as this node's raft knows it and,
// on the group's leader, what it knows of each member.
type Membership struct {
	Status   raft.BasicStatus
	Voters   []uint64 // the (incoming) voters, ascending
	Outgoing []uint64 // the outgoing voters while the group is in a joint configuration
	Learners []uint64 // ascending
	// On the leader only: each member's match index, and whether it was
	// heard from within the last election timeout (raft's RecentActive,
	// which CheckQuorum resets every election timeout).
	Match  map[uint64]uint64
	Active map[uint64]bool
	// ConfPending: a membership change in this node's log (or proposed here) is not applied
	// yet, so Voters and Learners may be about to change (a learner being added is not
	// listed until its entry applies).
	ConfPending bool
}

// Joint reports whether the group is in a joint configuration.
func (m Membership) Joint() bool { return len(m.Outgoing) > 0 }

// IsVoter reports whether id votes in the incoming configuration.
func (m Membership) IsVoter(id uint64) bool { return slices.Contains(m.Voters, id) }

// IsLearner reports whether id is a learner.
func (m Membership) IsLearner(id uint64) bool { return slices.Contains(m.Learners, id) }

func (e *engine) membership(id uint64) (Membership, bool) {
	g, ok := e.groups[id]
	if !ok {
		return Membership{}, false
	}
	st := g.rn.Status()
	m := Membership{
		Status:   st.BasicStatus,
		Voters:   sortedIDs(st.Config.Voters[0]),
		Outgoing: sortedIDs(st.Config.Voters[1]),
		Learners: append(sortedIDs(st.Config.Learners), sortedIDs(st.Config.LearnersNext)...),
	}
	slices.Sort(m.Learners)
	if st.RaftState == raft.StateLeader && g.confTerm != st.GetTerm() {
		// First look as leader in this term: what this node noted as a follower may be
		// gone (a restart) or overwritten (a leader that never had the entry), so the
		// pending change is read from the log itself, as raft's own pendingConfIndex is.
		g.confAt, g.confTerm = g.lastConfChange(st.Applied), st.GetTerm()
	}
	m.ConfPending = g.confProposed || g.confAt > st.Applied
	if st.RaftState == raft.StateLeader {
		m.Match, m.Active = map[uint64]uint64{}, map[uint64]bool{}
		g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
			m.Match[id], m.Active[id] = pr.Match, pr.RecentActive
		})
	}
	return m, true
}

// lastConfChange returns the index of the last membership change stored in g's log past
// applied (0: none). A log it cannot read counts as pending to its end: waiting for the
// change to apply costs a moment, acting on a configuration about to change does not.
func (g *group) lastConfChange(applied uint64) uint64 {
	last, _ := g.st.LastIndex()
	at := uint64(0)
	for lo := applied + 1; lo <= last; {
		ents, err := g.st.Entries(lo, last+1, confScanBytes)
		if err != nil || len(ents) == 0 {
			return last
		}
		for _, ent := range ents {
			if t := ent.GetType(); t == pb.EntryConfChange || t == pb.EntryConfChangeV2 {
				at = ent.GetIndex()
			}
		}
		lo = ents[len(ents)-1].GetIndex() + 1
	}
	return at
}

// confScanBytes pages lastConfChange's reads of a long unapplied tail.
const confScanBytes = 1 << 20

func sortedIDs[V any](set map[uint64]V) []uint64 {
	out := make([]uint64, 0, len(set))
	for id := range set {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// proposeConfChange hands a membership change to the group's raft, which
// must be led here.
func (e *engine) proposeConfChange(id uint64, cc *pb.ConfChangeV2) error {
	if e.failed != nil {
		return e.failed
	}
	g, ok := e.groups[id]
	if !ok {
		return fmt.Errorf("%w %d", ErrUnknownGroup, id)
	}
	e.setQuiet(g, false)
	g.idle = 0
	if bs := g.rn.BasicStatus(); bs.RaftState != raft.StateLeader {
		return &NotLeaderError{Group: id, Leader: bs.Lead}
	}
	e.touch(g)
	if err := g.rn.ProposeConfChange(cc); err != nil {
		return err
	}
	g.confProposed = true // in the leader's log now; stored, and confAt set, by the next round
	return nil
}

// ReplaceState is where the replacement of one voter by a new member
// stands, as ReplaceStep sees it on the group's leader.
type ReplaceState int

const (
	ReplaceNotLeader  ReplaceState = iota // this node does not lead the group: nothing to do here
	ReplaceNotMember                      // old is no member: nothing to replace
	ReplaceDone                           // new votes and old is gone
	ReplaceOldAlive                       // old was heard from lately: refused (two processes would claim one name)
	ReplaceBusy                           // a joint configuration is being left: wait
	ReplaceAddLearner                     // step 1: add new as a learner
	ReplaceCatchingUp                     // new is a learner behind the commit index: wait
	ReplacePromote                        // step 2: new becomes a voter and old is removed, in one joint change
	ReplaceRemoveOld                      // new votes beside old (not made here): remove old
)

var replaceStateNames = [...]string{"not leader", "not a member", "done", "old member alive", "leaving joint configuration",
	"add learner", "catching up", "promote and remove", "remove old"}

func (s ReplaceState) String() string {
	if int(s) < len(replaceStateNames) {
		return replaceStateNames[s]
	}
	return fmt.Sprintf("ReplaceState(%d)", int(s))
}

// ReplaceStep decides, on a group's leader, the next membership change that
// replaces the voter oldID (a member whose storage was lost) by newID (the same
// replica restarted empty under a new ID): new joins as a learner, catches
// up from the leader's log (raft's appends, paced by its flow control), and
// only once its match index is within maxLag of the commit index does one
// ConfChangeV2 make it a voter and remove old. That change is joint
// (etcd raft's joint consensus, left automatically): each decision then
// needs a majority of the old voters and one of the new, which the intact
// replicas alone give, so the group never passes through a configuration
// with four voters (one more needed for quorum while old is dead) nor two
// (no failure tolerated), and no configuration counts old and new in one
// majority. cc is nil when there is nothing to propose now.
func ReplaceStep(m Membership, oldID, newID, maxLag uint64) (ReplaceState, *pb.ConfChangeV2) {
	switch {
	case m.Status.RaftState != raft.StateLeader:
		return ReplaceNotLeader, nil
	case m.Joint():
		return ReplaceBusy, nil
	}
	oldVotes := m.IsVoter(oldID)
	switch {
	case m.IsVoter(newID) && !oldVotes && !m.IsLearner(oldID):
		return ReplaceDone, nil
	case !oldVotes && !m.IsVoter(newID):
		return ReplaceNotMember, nil
	case oldID == m.Status.ID || m.Active[oldID]:
		return ReplaceOldAlive, nil
	case m.IsVoter(newID):
		return ReplaceRemoveOld, confChange(pb.ConfChangeRemoveNode, oldID)
	case !m.IsLearner(newID):
		return ReplaceAddLearner, confChange(pb.ConfChangeAddLearnerNode, newID)
	case m.Match[newID]+maxLag < m.Status.GetCommit():
		return ReplaceCatchingUp, nil
	}
	cc := confChange(pb.ConfChangeAddNode, newID)
	cc.Changes = append(cc.Changes, &pb.ConfChangeSingle{Type: pb.ConfChangeRemoveNode.Enum(), NodeId: new(oldID)})
	cc.Transition = pb.ConfChangeTransitionJointImplicit.Enum()
	return ReplacePromote, cc
}

func confChange(t pb.ConfChangeType, id uint64) *pb.ConfChangeV2 {
	return &pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{{Type: t.Enum(), NodeId: new(id)}}}
}

// AddLearner is the membership change that adds id to a group as a learner: it receives
// the log and applies it, and never votes (a node of a region larger than its replication
// factor is a learner of the region's metadata group: it reads placements without weighing
// on the metadata's quorum).
func AddLearner(id uint64) *pb.ConfChangeV2 { return confChange(pb.ConfChangeAddLearnerNode, id) }

// MoveStep decides, on a group's leader, the next membership change that moves the replica
// fromID (a live node leaving, or a dead one that will not come back) to toID (a node that
// does not hold the group yet): toID joins as a learner, catches up, and only once its
// match index is within maxLag of the commit index does one joint ConfChangeV2 make it a
// voter and remove fromID, so the group never has fewer voters than before (I8). The learner
// must also have acknowledged something (a match index above 0): in a group whose log is
// shorter than maxLag, the lag alone would let an empty learner through. Unlike
// ReplaceStep it does not wait for fromID to fall silent: the operator asked for the move.
// The leader never removes itself: when fromID leads, the state is ReplaceOldAlive and the
// caller hands the leadership to another voter first. cc is nil when there is nothing to
// propose now.
func MoveStep(m Membership, fromID, toID, maxLag uint64) (ReplaceState, *pb.ConfChangeV2) {
	switch {
	case m.Status.RaftState != raft.StateLeader:
		return ReplaceNotLeader, nil
	case m.Joint():
		return ReplaceBusy, nil
	}
	fromVotes := m.IsVoter(fromID)
	switch {
	case m.IsVoter(toID) && !fromVotes && !m.IsLearner(fromID):
		return ReplaceDone, nil
	case !fromVotes && !m.IsVoter(toID):
		return ReplaceNotMember, nil
	case fromID == m.Status.ID:
		return ReplaceOldAlive, nil
	case m.IsVoter(toID):
		return ReplaceRemoveOld, confChange(pb.ConfChangeRemoveNode, fromID)
	case !m.IsLearner(toID):
		return ReplaceAddLearner, confChange(pb.ConfChangeAddLearnerNode, toID)
	case m.Match[toID] == 0 || m.Match[toID]+maxLag < m.Status.GetCommit():
		return ReplaceCatchingUp, nil
	}
	return ReplacePromote, promoteAndRemove(toID, fromID)
}

// promoteAndRemove is the joint change that makes learner id a voter and removes old.
func promoteAndRemove(id, old uint64) *pb.ConfChangeV2 {
	cc := confChange(pb.ConfChangeAddNode, id)
	cc.Changes = append(cc.Changes, &pb.ConfChangeSingle{Type: pb.ConfChangeRemoveNode.Enum(), NodeId: new(old)})
	cc.Transition = pb.ConfChangeTransitionJointImplicit.Enum()
	return cc
}

// RemoveMember is the membership change that removes id (a learner, or a voter whose
// removal leaves enough voters) from a group.
func RemoveMember(id uint64) *pb.ConfChangeV2 { return confChange(pb.ConfChangeRemoveNode, id) }

// PromoteAndRemove is the joint change that makes learner id a voter and removes voter old
// in one step (a node leaving the metadata group hands its vote to a learner).
func PromoteAndRemove(id, old uint64) *pb.ConfChangeV2 { return promoteAndRemove(id, old) }
