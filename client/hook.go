package client

import (
	"context"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/clienthook"
	"github.com/quicmq/quicmq/internal/wire"
)

// The module's internal packages reach the Conn through internal/clienthook, so that no
// measurement aid is part of this package's API.
func init() {
	clienthook.OpenStream = func(ctx context.Context, c any) (*quic.Stream, error) { return c.(*Conn).openStream(ctx) }
	clienthook.Limits = func(c any) wire.Limits { return c.(*Conn).lim }
	clienthook.StreamErr = func(c any, err error) error { return c.(*Conn).streamErr(err) }
	clienthook.Start = func(s any) (wire.StartKind, uint64) { st := s.(Start); return st.kind, st.value }
	clienthook.OfferVersion = func(o any, v uint64) any { opts := o.(Options); opts.offer = v; return opts }
}
