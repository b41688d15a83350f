package node

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
)

// upstreamTarget is where a subscription is passed on to: a node of another region, for a
// direct replay of that region's log. (A topic another node of this region owns is served
// through an upstream to that node instead, see upstream.go, which survives its restart.)
type upstreamTarget struct {
	what string // for errors: `region "us"`
	open func(ctx context.Context) (*quic.Stream, error)
}

func (n *Node) regionTarget(region string) upstreamTarget {
	return upstreamTarget{
		what: fmt.Sprintf("region %q", region),
		open: func(ctx context.Context) (*quic.Stream, error) { return n.fed.OpenStream(ctx, region) },
	}
}

// passThrough serves a subscription (already counted against the connection's limit) from
// another region's log ("T in region R from offset N"). It opens a stream on the link, forwards the SUBSCRIBE, and copies
// whole frames both ways without storing anything. Flow control stays end to end: when the
// client stops reading, the copy stops, the link stream's window fills and the upstream
// subscription blocks, with no buffer here beyond the copy's. When the upstream fails, the
// client gets an ERROR naming it (the copy keeps frames whole so that one can follow).
func (s *session) passThrough(str *quic.Stream, r *wire.Reader, req *wire.Subscribe, t upstreamTarget, refuse func(*wire.Error)) {
	n := s.n
	if n.fed == nil {
		refuse(wire.Errorf(wire.CodeUnavailable, "%s: this node has no links to other nodes", t.what))
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	remote, err := t.open(ctx)
	if err != nil {
		refuse(wire.Errorf(wire.CodeUnavailable, "%s: %v", t.what, err))
		return
	}
	fwd := *req
	fwd.Region = "" // served there from that region's own log
	if _, err := remote.Write(wire.Append(nil, &fwd)); err != nil {
		remote.CancelRead(wire.AppCancelled)
		refuse(wire.Errorf(wire.CodeUnavailable, "%s: %v", t.what, err))
		return
	}
	n.metrics.subscriptions.Inc()
	defer n.metrics.subscriptions.Dec()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // records: remote -> client
		defer wg.Done()
		defer cancel()
		var rename func(string) string
		if s.actor.Prefix != "" {
			rename = s.actor.ClientName
		}
		err := copyFrames(str, remote, n.limits.MaxFrame, rename)
		if err != nil && ctx.Err() == nil && !errors.Is(err, errDownstream) {
			w := wire.NewWriter(str)
			w.Write(&wire.ErrorFrame{Code: wire.CodeUnavailable, Message: fmt.Sprintf("%s: the stream from it broke: %v", t.what, err)})
			w.Flush()
		}
		str.Close()
	}()
	go func() { // acks: client -> remote, starting with what the client already sent
		defer wg.Done()
		io.Copy(remote, r.Bytes())
		remote.Close()
	}()
	<-ctx.Done()
	remote.CancelRead(wire.AppCancelled)
	remote.CancelWrite(wire.AppCancelled)
	str.CancelRead(wire.AppCancelled)
	wg.Wait()
}

// errDownstream marks a failed write to the client: nothing can be told to it.
var errDownstream = errors.New("node: client stream write failed")

// copyFrames copies whole frames from src to dst until src ends cleanly (nil) or fails. It
// writes whatever complete frames it has before it blocks on src, so latency is that of the
// upstream, and never writes part of a frame. With rename, the topic names of TOPIC frames
// are rewritten (a tenant's namespace taken off); every other frame passes as it is.
func copyFrames(dst io.Writer, src io.Reader, maxFrame int, rename func(string) string) error {
	br := bufio.NewReaderSize(src, 32<<10)
	out := make([]byte, 0, 32<<10)
	var hdr [5]byte
	for {
		if len(out) > 0 && (br.Buffered() < len(hdr) || len(out) >= 256<<10) {
			if _, err := dst.Write(out); err != nil {
				return errDownstream
			}
			out = out[:0]
		}
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				if len(out) > 0 {
					if _, err := dst.Write(out); err != nil {
						return errDownstream
					}
				}
				return nil
			}
			return err
		}
		size := int(binary.BigEndian.Uint32(hdr[1:]))
		if size > maxFrame {
			return fmt.Errorf("%w: a frame of %d bytes from upstream", wire.ErrFrameTooLarge, size)
		}
		out = append(out, hdr[:]...)
		start := len(out)
		out = slices.Grow(out, size)[:start+size]
		if _, err := io.ReadFull(br, out[start:]); err != nil {
			return fmt.Errorf("frame cut short: %w", err)
		}
		if rename != nil && wire.Type(hdr[0]) == wire.TypeTopic {
			f, _, err := wire.Decode(out[start-len(hdr):], wire.Limits{MaxFrame: maxFrame})
			if err != nil {
				return fmt.Errorf("upstream TOPIC frame: %w", err)
			}
			t := f.(*wire.Topic)
			t.Name = rename(t.Name)
			out = wire.Append(out[:start-len(hdr)], t)
		}
	}
}
