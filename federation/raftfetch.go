package federation

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
)

// Catch-up fetches: a replica installing a snapshot (metadata only) fetches the records it
// lacks from the snapshot's sender, over a stream of its own on the link to that node
// (RAFT class fetch, then one RAFT_FETCH), at the lowest QUIC urgency: the control stream
// (votes, heartbeats, responses) and the bulk stream (appends) go first, and the stream's
// flow control paces the sender to what the fetching node writes. The accepting node
// answers with RAFT_CHUNK frames read from its own log (Config.Raft.Fetch), never past what
// it applied, and ends the stream after the last one, or with an ERROR.

// raftFetchUrgency is below every other stream's (quic-go's default urgency is 3).
const raftFetchUrgency = 6

// Fetch reads records [from, to) of a group's log from the node of this region whose raft
// ID is node, handing each chunk to chunk in order (replica.Fetcher).
func (f *Federation) Fetch(ctx context.Context, node, group uint64, log string, from, to, maxBytes uint64, chunk func([]byte) error) error {
	var conn *quic.Conn
	if f.cfg.Raft.ID != 0 {
		f.mu.Lock()
		for _, l := range f.mu.links {
			if l.peer.Region == f.cfg.Region && l.peer.RaftID == node {
				l.mu.Lock()
				conn = l.mu.conn
				l.mu.Unlock()
				break
			}
		}
		f.mu.Unlock()
	}
	if conn == nil {
		return fmt.Errorf("federation: fetch from raft node %d: no link to it is up", node)
	}
	str, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return fmt.Errorf("federation: fetch from raft node %d: %w", node, err)
	}
	str.SetPriority(raftFetchUrgency, true)
	stop := context.AfterFunc(ctx, func() { str.CancelRead(wire.AppCancelled); str.CancelWrite(wire.AppCancelled) })
	defer stop()
	defer str.CancelRead(wire.AppCancelled)
	w := wire.NewWriter(str)
	w.Write(&wire.Raft{Class: wire.RaftFetch, From: f.cfg.Raft.ID, To: node})
	w.Write(&wire.RaftFetchReq{Group: group, Log: log, From: from, To: to, MaxBytes: maxBytes})
	if err := w.Flush(); err != nil {
		return fmt.Errorf("federation: fetch from raft node %d: %w", node, err)
	}
	str.Close()
	r := wire.NewReader(str, wire.Limits{MaxFrame: f.cfg.Raft.MaxFrame})
	next := from
	for next < to {
		fr, err := r.Read()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("the stream ended at offset %d", next)
			}
			return fmt.Errorf("federation: fetch of group %d %q from raft node %d: %w", group, log, node, err)
		}
		switch fr := fr.(type) {
		case *wire.ErrorFrame:
			return fmt.Errorf("federation: fetch of group %d %q from raft node %d: %w", group, log, node, fr.AsError())
		case *wire.RaftChunk:
			if fr.Next <= next || fr.Next > to {
				return fmt.Errorf("federation: fetch of group %d %q from raft node %d: chunk up to %d after %d (want at most %d)", group, log, node, fr.Next, next, to)
			}
			if err := chunk(fr.Chunk); err != nil {
				return err
			}
			next = fr.Next
		default:
			return fmt.Errorf("federation: fetch of group %d %q from raft node %d: unexpected %s", group, log, node, fr.Type())
		}
	}
	return nil
}

// serveFetch answers a fetch stream a peer of this region opened: one RAFT_FETCH, then the
// chunks until its end. Called from serveRaft once the opener is checked.
func (f *Federation) serveFetch(ctx context.Context, str *quic.Stream, r *wire.Reader, fail func(*wire.Error) error) error {
	if f.cfg.Raft.Fetch == nil {
		return fail(wire.Errorf(wire.CodeForbidden, "node %q serves no catch-up fetches", f.cfg.Name))
	}
	fr, err := r.Read()
	if err != nil {
		return fail(wire.Errorf(wire.CodeProtocol, "fetch stream: %v", err))
	}
	req, ok := fr.(*wire.RaftFetchReq)
	if !ok {
		return fail(wire.Errorf(wire.CodeProtocol, "unexpected %s on a fetch stream", fr.Type()))
	}
	maxBytes := min(max(req.MaxBytes, 1), uint64(f.cfg.Raft.MaxFrame/2))
	stop := context.AfterFunc(ctx, func() { str.CancelWrite(wire.AppCancelled) })
	defer stop()
	w := wire.NewWriter(str)
	for next := req.From; next < req.To; {
		chunk, n, err := f.cfg.Raft.Fetch(req.Group, req.Log, next, req.To, maxBytes)
		if err != nil {
			return fail(wire.Errorf(wire.CodeUnavailable, "%v", err))
		}
		if n <= next {
			return fail(wire.Errorf(wire.CodeUnavailable, "group %d %q: no record at offset %d here", req.Group, req.Log, next))
		}
		if err := w.Write(&wire.RaftChunk{Next: n, Chunk: chunk}); err != nil {
			return err
		}
		if err := w.Flush(); err != nil {
			return err
		}
		next = n
	}
	return str.Close()
}
