package node

import (
	"context"
	"errors"
	"io"

	"github.com/quicmq/quicmq/internal/wire"
)

// Asking another node over its link: one stream, one request frame, the answer frames to
// FIN. Management (node/manage, through manage.HereConfig.AskNode), a topic's creation and
// listing in a region, and a replicated group's store ask this way.

// askNode sends req to node over its link and hands each answer frame to fn until FIN. An
// ERROR answer is returned as it is; a failure to ask is CodeUnavailable.
func (n *Node) askNode(ctx context.Context, node string, req wire.Frame, fn func(wire.Frame) error) *wire.Error {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ManageTimeout)
	defer cancel()
	err := n.streamTo(ctx, node, req, fn)
	var we *wire.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &we):
		return we
	}
	return wire.Errorf(wire.CodeUnavailable, "node %q of this region could not be asked (%s): %v", node, req.Type(), err)
}

// streamTo opens a stream to node, sends req, closes its side and reads the answer frames
// to the end; an ERROR frame comes back as a *wire.Error.
func (n *Node) streamTo(ctx context.Context, node string, req wire.Frame, fn func(wire.Frame) error) error {
	str, err := n.fed.OpenStreamTo(ctx, node)
	if err != nil {
		return err
	}
	defer str.CancelRead(wire.AppCancelled)
	stop := context.AfterFunc(ctx, func() { str.CancelRead(wire.AppCancelled) })
	defer stop()
	if _, err := str.Write(wire.Append(nil, req)); err != nil {
		return err
	}
	str.Close()
	r := wire.NewReader(str, wire.Limits{})
	for {
		f, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if ef, ok := f.(*wire.ErrorFrame); ok {
			return ef.AsError()
		}
		if err := fn(f); err != nil {
			return err
		}
	}
}
