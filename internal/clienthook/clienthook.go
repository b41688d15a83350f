// Package clienthook is the seam through which the module's internal packages (the
// shared-stream ablation, bench/sharedstream) reach unexported parts of a client.Conn
// without the SDK exporting them. Package client sets the functions in its init; they take
// the *client.Conn and client.Start as any, since this package cannot import client.
package clienthook

import (
	"context"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
)

var (
	// OpenStream opens a new stream on conn (a *client.Conn), waiting for stream credit
	// within ctx, as the SDK does for each of its operations.
	OpenStream func(ctx context.Context, conn any) (*quic.Stream, error)
	// Limits returns the frame limits conn's node announced.
	Limits func(conn any) wire.Limits
	// StreamErr names the failure of a stream of conn (its connection's loss, a reset).
	StreamErr func(conn any, err error) error
	// Start returns the wire form of a client.Start.
	Start func(start any) (wire.StartKind, uint64)
	// OfferVersion returns opts (a client.Options) with the highest protocol version its
	// Conn says in HELLO lowered to v (a benchmark's older client: docs/benchmarks.md).
	OfferVersion func(opts any, v uint64) any
)
