package client

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/wire"
)

// TopicInfo describes one topic of a node's region.
type TopicInfo struct {
	Name  string
	First uint64 // first retained offset
	Next  uint64 // the offset the next record will get (the durable high-watermark)
	Bytes uint64 // approximate stored bytes
}

// Records is the number of retained records.
func (t TopicInfo) Records() uint64 {
	if t.Next < t.First {
		return 0
	}
	return t.Next - t.First
}

// Topics lists the topics matching pattern ("" or ">" for all), sorted by name, on a stream
// of its own.
func (c *Conn) Topics(ctx context.Context, pattern string) ([]TopicInfo, error) {
	if pattern == "" {
		pattern = ">"
	}
	if err := checkSubscribe(pattern, SubscribeOptions{}); err != nil {
		return nil, wrap(fmt.Sprintf("topics %q", pattern), err)
	}
	s, err := c.openStream(ctx)
	if err != nil {
		return nil, wrap(fmt.Sprintf("topics %q", pattern), err)
	}
	// The stream serves this call only, so an ended ctx simply aborts it.
	stop := context.AfterFunc(ctx, func() {
		s.CancelRead(wire.AppCancelled)
		s.CancelWrite(wire.AppCancelled)
	})
	defer stop()
	defer s.CancelRead(wire.AppCancelled) // no-op after a clean end; frees the stream otherwise
	list, err := c.readTopics(s, pattern)
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		s.CancelWrite(wire.AppCancelled)
		return nil, wrap(fmt.Sprintf("topics %q", pattern), err)
	}
	return list, nil
}

func (c *Conn) readTopics(s *quic.Stream, pattern string) ([]TopicInfo, error) {
	if _, err := s.Write(wire.Append(nil, &wire.Topics{Pattern: pattern})); err != nil {
		return nil, c.streamErr(err)
	}
	// The node may have answered and stopped reading already, which makes Close fail; the
	// answer is what counts, and reading it reports any real failure.
	s.Close()
	var list []TopicInfo
	r := wire.NewReader(s, c.lim)
	for {
		f, err := r.Read()
		switch {
		case errors.Is(err, io.EOF):
			return list, nil
		case errors.Is(err, wire.ErrMalformed), errors.Is(err, wire.ErrFrameTooLarge), errors.Is(err, io.ErrUnexpectedEOF):
			return nil, errorf(CodeProtocol, "%v", err)
		case err != nil:
			return nil, c.streamErr(err)
		}
		switch f := f.(type) {
		case *wire.TopicInfo:
			list = append(list, TopicInfo{Name: f.Name, First: f.First, Next: f.Next, Bytes: f.Bytes})
		case *wire.ErrorFrame:
			return nil, fromWire(f.Code, f.Message)
		default:
			return nil, errorf(CodeProtocol, "the node sent %s on a listing stream", f.Type())
		}
	}
}
