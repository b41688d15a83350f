package replica

import (
	"encoding/binary"
	"errors"
	"fmt"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// The wire form of one Send: every message of a round from one node to
// another. Heartbeats and their responses, the bulk of an idle region's
// traffic, are coalesced into a few bytes each (group, term, commit); every
// other message travels as its protobuf encoding.
//
//	batch   = version u8 | from uvarint | to uvarint | count uvarint | message*
//	message = kind u8 | group uvarint | body
//	body    = term uvarint | commit uvarint        (kinds heartbeat, heartbeat response, quiesce, wake)
//	        | len uvarint | protobuf raftpb.Message (kind raft)
//
// A wake (Message.Wake) carries the sender's term and a commit of 0. A node
// built before wake existed refuses a batch holding one (unknown kind): the
// batch is lost and raft resends what else it carried.
const (
	codecVersion = 1

	kindRaftMsg   = 0
	kindHeartbeat = 1
	kindHBResp    = 2
	kindQuiesce   = 3
	kindWake      = 4

	// MaxBatchMessages bounds the messages DecodeBatch accepts in one batch.
	MaxBatchMessages = 1 << 20
)

// ErrBadBatch is the error of DecodeBatch for bytes that are not a batch.
var ErrBadBatch = errors.New("replica: malformed message batch")

// EncodeBatch appends the wire form of msgs, sent from node from to node to.
func EncodeBatch(dst []byte, from, to uint64, msgs []Message) ([]byte, error) {
	dst = append(dst, codecVersion)
	dst = binary.AppendUvarint(dst, from)
	dst = binary.AppendUvarint(dst, to)
	dst = binary.AppendUvarint(dst, uint64(len(msgs)))
	for _, m := range msgs {
		if m.Raft == nil {
			return nil, fmt.Errorf("replica: encode: message of group %d has no raft message", m.Group)
		}
		if k, ok := compactKind(m); ok {
			dst = append(dst, k)
			dst = binary.AppendUvarint(dst, m.Group)
			dst = binary.AppendUvarint(dst, m.Raft.GetTerm())
			dst = binary.AppendUvarint(dst, m.Raft.GetCommit())
			continue
		}
		dst = append(dst, kindRaftMsg)
		dst = binary.AppendUvarint(dst, m.Group)
		dst = binary.AppendUvarint(dst, uint64(proto.Size(m.Raft)))
		var err error
		if dst, err = (proto.MarshalOptions{}).MarshalAppend(dst, m.Raft); err != nil {
			return nil, fmt.Errorf("replica: encode message of group %d: %w", m.Group, err)
		}
	}
	return dst, nil
}

// compactKind says whether m is a heartbeat (or response) that the compact
// form carries whole: nothing set beyond type, term, commit and the
// endpoints (a ReadIndex context, for one, travels in full).
func compactKind(m Message) (byte, bool) {
	r := m.Raft
	plain := len(r.GetContext()) == 0 && r.GetLogTerm() == 0 && r.GetIndex() == 0 && len(r.GetEntries()) == 0 &&
		!r.GetReject() && r.GetRejectHint() == 0 && r.GetVote() == 0 && r.Snapshot == nil && len(r.GetResponses()) == 0
	switch {
	case m.Wake:
		return kindWake, true // never stepped: only the term matters
	case !plain:
		return 0, false
	case m.Quiesce && r.GetType() == pb.MsgHeartbeat:
		return kindQuiesce, true
	case m.Quiesce:
		return 0, false
	case r.GetType() == pb.MsgHeartbeat:
		return kindHeartbeat, true
	case r.GetType() == pb.MsgHeartbeatResp && r.GetCommit() == 0:
		return kindHBResp, true
	}
	return 0, false
}

// DecodeBatch parses a batch made by EncodeBatch. Every length is checked
// against what is left before anything is allocated.
func DecodeBatch(p []byte) (from, to uint64, msgs []Message, err error) {
	bad := func(what string) error { return fmt.Errorf("%w: %s", ErrBadBatch, what) }
	if len(p) == 0 || p[0] != codecVersion {
		return 0, 0, nil, bad("unknown version")
	}
	p = p[1:]
	uv := func() (uint64, bool) {
		v, n := binary.Uvarint(p)
		if n <= 0 {
			return 0, false
		}
		p = p[n:]
		return v, true
	}
	var ok bool
	var count uint64
	if from, ok = uv(); !ok {
		return 0, 0, nil, bad("sender")
	}
	if to, ok = uv(); !ok {
		return 0, 0, nil, bad("receiver")
	}
	if count, ok = uv(); !ok || count > MaxBatchMessages || count > uint64(len(p))/3 {
		return 0, 0, nil, bad(fmt.Sprintf("message count %d for %d bytes", count, len(p)))
	}
	msgs = make([]Message, 0, count)
	for i := range count {
		if len(p) == 0 {
			return 0, 0, nil, bad(fmt.Sprintf("message %d missing", i))
		}
		kind := p[0]
		p = p[1:]
		group, ok := uv()
		if !ok {
			return 0, 0, nil, bad(fmt.Sprintf("message %d: group", i))
		}
		switch kind {
		case kindHeartbeat, kindHBResp, kindQuiesce, kindWake:
			term, ok1 := uv()
			commit, ok2 := uv()
			if !ok1 || !ok2 {
				return 0, 0, nil, bad(fmt.Sprintf("message %d: heartbeat", i))
			}
			t := pb.MsgHeartbeat
			if kind == kindHBResp || kind == kindWake {
				t = pb.MsgHeartbeatResp
			}
			r := &pb.Message{Type: t.Enum(), From: new(from), To: new(to), Term: new(term)}
			switch kind {
			case kindWake:
				if commit != 0 {
					return 0, 0, nil, bad(fmt.Sprintf("message %d: wake with commit %d", i, commit))
				}
			case kindHeartbeat, kindQuiesce:
				r.Commit = new(commit)
			}
			msgs = append(msgs, Message{Group: group, Quiesce: kind == kindQuiesce, Wake: kind == kindWake, Raft: r})
		case kindRaftMsg:
			n, ok := uv()
			if !ok || n > uint64(len(p)) {
				return 0, 0, nil, bad(fmt.Sprintf("message %d: length", i))
			}
			r := &pb.Message{}
			if err := proto.Unmarshal(p[:n], r); err != nil {
				return 0, 0, nil, bad(fmt.Sprintf("message %d: %v", i, err))
			}
			p = p[n:]
			msgs = append(msgs, Message{Group: group, Raft: r})
		default:
			return 0, 0, nil, bad(fmt.Sprintf("message %d: unknown kind %d", i, kind))
		}
	}
	if len(p) != 0 {
		return 0, 0, nil, bad(fmt.Sprintf("%d bytes after the last message", len(p)))
	}
	return from, to, msgs, nil
}
