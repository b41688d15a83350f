package node

import (
	"context"
	"io"
	"sync"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
)

// passThrough serves a subscription (already counted against the connection's limit) on another region's log ("T in region R from offset N"):
// it opens a stream on the link to R, forwards the SUBSCRIBE, and copies bytes both ways
// without storing anything locally. Flow control stays end to end: when the client stops
// reading, the copy stops, the link stream's window fills and R's subscription blocks, with
// no buffer here beyond the copy's.
func (s *session) passThrough(str *quic.Stream, r *wire.Reader, req *wire.Subscribe, refuse func(*wire.Error)) {
	n := s.n
	if n.fed == nil {
		refuse(wire.Errorf(wire.CodeUnavailable, "region %q: this node has no links to other regions", req.Region))
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	remote, err := n.fed.OpenStream(ctx, req.Region)
	if err != nil {
		refuse(wire.Errorf(wire.CodeUnavailable, "region %q: %v", req.Region, err))
		return
	}
	fwd := *req
	fwd.Region = ""
	if _, err := remote.Write(wire.Append(nil, &fwd)); err != nil {
		remote.CancelRead(wire.AppCancelled)
		refuse(wire.Errorf(wire.CodeUnavailable, "region %q: %v", req.Region, err))
		return
	}
	n.metrics.subscriptions.Inc()
	defer n.metrics.subscriptions.Dec()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // records: remote -> client
		defer wg.Done()
		io.Copy(str, remote)
		str.Close()
		cancel()
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
