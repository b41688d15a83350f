package main

// The bound under scenario 7 ("truefanout --systems quic-only"): the same one-topic fan-out
// on bare quic-go, with nothing of a broker but the copying. A child process ("broker --kind
// quic-only") takes records on one publisher stream and writes each to every subscription's
// stream, one QUIC stream per subscription as QuicMQ has, one writer goroutine per subscriber
// connection that writes a run of records to each of its streams in turn, as the node's
// fanout writer (node/tail/fanout.go) does. It stores nothing, acknowledges nothing and sends no
// header but a length: what it costs per delivery is what quic-go's one-stream-per-
// subscription costs on this machine, which no broker built on it avoids.
//
// Its wire, on streams the clients open (the node's listener TLS and windows, ALPN "quicsink"):
//   - the first byte of a stream says what it is: 'P' a publisher's, 'S' a subscription's;
//   - the broker answers a subscription's 'S' with one byte, 'K', once it is on the list that
//     every record after is written to;
//   - after that both carry records as a 4-byte big-endian length and that many bytes.

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/certs"
)

// floorRun is the most a floor writer puts into one run for each stream (the node's fanout
// keeps runs of at most ReadAhead; a smaller cap only splits a burst into more writes).
const floorRun = 64 << 10

// floorQueue is the records a subscriber connection's writer may be behind the publisher
// before the publisher's reader waits for it (records, not bytes).
const floorQueue = 1 << 14

// floorMaxRecord is the largest record the floor takes.
const floorMaxRecord = 1 << 20

// floorListenConfig is the node's listener configuration (sinkQUICConfig) with the stream
// limit of the node's default (Config.MaxStreamsPerConn).
func floorListenConfig() *quic.Config {
	c := sinkQUICConfig()
	c.MaxIncomingStreams = 2048
	return c
}

// floorDialConfig has the QuicMQ SDK's receive windows (client/options.go), so that the
// subscribers' side of the bound is the SDK's.
func floorDialConfig() *quic.Config {
	return &quic.Config{
		MaxIncomingStreams:             -1,
		MaxIncomingUniStreams:          -1,
		InitialStreamReceiveWindow:     512 << 10,
		MaxStreamReceiveWindow:         2 << 20,
		InitialConnectionReceiveWindow: 64 << 20,
		MaxConnectionReceiveWindow:     256 << 20,
	}
}

// floorCA is the directory, in the broker's data directory, of the CA its certificate comes
// from; floorCADir is it for the clients, given the broker's temporary directory.
const floorCA = "ca"

func floorCADir(brokerDir string) string { return filepath.Join(brokerDir, "data", floorCA) }

// floorConn is one subscriber connection at the floor broker: its subscriptions' streams and
// the records its writer has still to write.
type floorConn struct {
	mu      sync.Mutex
	streams []*quic.Stream // under mu; only appended to
	recs    chan []byte    // framed records
	done    chan struct{}  // closed when the connection ends
}

// floorBroker fans the publishers' records out to every subscriber connection's writer.
type floorBroker struct {
	mu    sync.Mutex
	conns []*floorConn // under mu, copied on write: those with at least one subscription
}

// serveFloor is "broker --kind quic-only": it listens on quicmqAddr until ctx ends.
func serveFloor(ctx context.Context, dataDir string) error {
	serverTLS, err := sinkServerTLS(filepath.Join(dataDir, floorCA))
	if err != nil {
		return err
	}
	ln, err := quic.ListenAddr(quicmqAddr, serverTLS, floorListenConfig())
	if err != nil {
		return fmt.Errorf("quic-only: listen: %w", err)
	}
	fmt.Println("READY")
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	var fb floorBroker
	for {
		c, err := ln.Accept(ctx)
		if err != nil {
			return nil // closed: the run is over
		}
		go fb.serveConn(c)
	}
}

func (fb *floorBroker) serveConn(c *quic.Conn) {
	var fc *floorConn
	defer func() {
		if fc != nil {
			fb.mu.Lock()
			// A new slice: a publisher's reader may be going through the old one.
			fb.conns = slices.DeleteFunc(slices.Clone(fb.conns), func(o *floorConn) bool { return o == fc })
			fb.mu.Unlock()
			close(fc.done)
		}
	}()
	for {
		s, err := c.AcceptStream(context.Background())
		if err != nil {
			return
		}
		var kind [1]byte
		if _, err := io.ReadFull(s, kind[:]); err != nil {
			s.CancelRead(1)
			s.CancelWrite(1)
			continue
		}
		switch kind[0] {
		case 'P':
			go fb.readPublisher(s)
		case 'S':
			if fc == nil {
				fc = &floorConn{recs: make(chan []byte, floorQueue), done: make(chan struct{})}
				go fc.write()
				fb.mu.Lock()
				fb.conns = append(fb.conns, fc)
				fb.mu.Unlock()
			}
			fc.mu.Lock()
			fc.streams = append(fc.streams, s)
			fc.mu.Unlock()
			if _, err := s.Write([]byte{'K'}); err != nil {
				continue
			}
		default:
			s.CancelRead(2)
			s.CancelWrite(2)
		}
	}
}

// readPublisher hands every record of s to each subscriber connection's writer.
func (fb *floorBroker) readPublisher(s *quic.Stream) {
	defer s.CancelWrite(0)
	r := bufio.NewReaderSize(s, 64<<10)
	for {
		framed, err := readFloorFrame(r)
		if err != nil {
			s.CancelRead(0)
			return
		}
		fb.mu.Lock()
		conns := fb.conns
		fb.mu.Unlock()
		for _, fc := range conns {
			select {
			case fc.recs <- framed:
			case <-fc.done:
			}
		}
	}
}

// write writes the records queued for fc's connection, a run at a time: every record queued
// by then, up to floorRun bytes, written once to each stream in turn.
func (fc *floorConn) write() {
	run := make([]byte, 0, floorRun)
	for {
		select {
		case rec := <-fc.recs:
			run = append(run[:0], rec...)
		case <-fc.done:
			return
		}
	more:
		for len(run) < floorRun {
			select {
			case rec := <-fc.recs:
				run = append(run, rec...)
			default:
				break more
			}
		}
		fc.mu.Lock()
		streams := fc.streams[:len(fc.streams):len(fc.streams)]
		fc.mu.Unlock()
		for _, s := range streams {
			s.Write(run) // a failed stream is its subscriber's end; the others go on
		}
	}
}

// readFloorFrame reads one length-prefixed record and returns it with its length, as it is
// written on (the record is framed[4:]).
func readFloorFrame(r *bufio.Reader) (framed []byte, err error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > floorMaxRecord {
		return nil, fmt.Errorf("quic-only: a %d-byte record, over the %d-byte limit", size, floorMaxRecord)
	}
	framed = append(make([]byte, 0, 4+size), n[:]...)
	if _, err := io.ReadFull(r, framed[4:4+size]); err != nil {
		return nil, err
	}
	return framed[:4+size], nil
}

// floorFan is the clients' side of the floor: fanSys over the wire above.
type floorFan struct {
	caDir  string
	conns  []*quic.Conn // publisher's first
	pub    *quic.Stream
	errs   atomic.Int64 // subscriptions that ended before close, with an error
	closed atomic.Bool
	wg     sync.WaitGroup
	once   sync.Once
}

func (f *floorFan) tls() (*tls.Config, error) {
	pool, err := certs.LoadCAPool(filepath.Join(f.caDir, "ca.pem"))
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13, NextProtos: []string{"quicsink"}}, nil
}

func (f *floorFan) dial(ctx context.Context, addr string) (*quic.Conn, error) {
	conf, err := f.tls()
	if err != nil {
		return nil, err
	}
	c, err := quic.DialAddr(ctx, addr, conf, floorDialConfig())
	if err != nil {
		return nil, err
	}
	f.conns = append(f.conns, c)
	return c, nil
}

func (f *floorFan) connect(ctx context.Context, subs, conns int, addr func(int) string, deliver func(int, int, []byte)) error {
	pc, err := f.dial(ctx, quicmqAddr)
	if err != nil {
		return fmt.Errorf("publisher: %w", err)
	}
	if f.pub, err = pc.OpenStreamSync(ctx); err != nil {
		return err
	}
	if _, err := f.pub.Write([]byte{'P'}); err != nil {
		return err
	}
	var subConns []*quic.Conn
	for c := range conns {
		sc, err := f.dial(ctx, addr(c))
		if err != nil {
			return fmt.Errorf("subscriber connection %d: %w", c, err)
		}
		subConns = append(subConns, sc)
	}
	for i := range subs {
		c := i % conns
		s, err := subConns[c].OpenStreamSync(ctx)
		if err != nil {
			return fmt.Errorf("subscription %d: %w", i, err)
		}
		var ok [1]byte
		if _, err = s.Write([]byte{'S'}); err == nil {
			_, err = io.ReadFull(s, ok[:])
		}
		if err == nil && ok[0] != 'K' {
			err = fmt.Errorf("answered %q, want 'K'", ok[0])
		}
		if err != nil {
			return fmt.Errorf("subscription %d: %w", i, err)
		}
		f.wg.Go(func() {
			r := bufio.NewReaderSize(s, 4<<10)
			for {
				framed, err := readFloorFrame(r)
				if err != nil {
					if !f.closed.Load() {
						f.errs.Add(1)
					}
					return
				}
				deliver(c, i, framed[4:])
			}
		})
	}
	return nil
}

func (f *floorFan) publish(_ context.Context, payload []byte) error {
	framed := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(payload)), uint32(len(payload)))
	_, err := f.pub.Write(append(framed, payload...))
	return err
}

func (f *floorFan) notes() []string {
	if n := f.errs.Load(); n > 0 {
		return []string{fmt.Sprintf("%d subscriptions ended early", n)}
	}
	return nil
}

func (f *floorFan) close() {
	f.once.Do(func() {
		f.closed.Store(true)
		for _, c := range f.conns {
			c.CloseWithError(0, "")
		}
		f.wg.Wait()
	})
}
