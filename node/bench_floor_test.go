package node_test

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// floorChunk is what the floor's clients write at a time: the most a client's PUBLISH_BATCH
// frame carries (64 KiB), so the transport sees writes as large as the SDK's.
const floorChunk = 64 << 10

// benchQUICFloor measures the transport alone, the floor under any durable publish path:
// conns QUIC connections on loopback (TLS 1.3, the node's default stream and connection
// windows), each carrying b.N/conns records of 1 KiB on one stream in writes of 64 KiB. The
// server reads and discards them and answers 16 bytes per 64 KiB (an ack's worth). No
// framing, no log, no Pebble: what is left is quic-go, crypto/tls, the kernel's UDP path
// and the Go runtime, at both ends, as in the node benchmarks.
//
// Beside the raw Pebble leaf of the same run it reports "bound/raw": the highest node/raw
// ratio that GOMAXPROCS fully busy cores could reach if a publish cost nothing beyond this
// transport and raw Pebble's own work, i.e. GOMAXPROCS / (floor + raw cpu-µs per record)
// against the raw rate. It is an upper bound: it leaves out the protocol, the log's
// encoding, acks, and any wait.
func benchQUICFloor(b *testing.B, conns int, payload []byte) {
	streams := startFloor(b, conns, serveFloorSink)
	chunk := make([]byte, 0, floorChunk)
	for len(chunk)+len(payload) <= floorChunk {
		chunk = append(chunk, payload...)
	}
	perChunk := len(chunk) / len(payload)

	b.SetBytes(int64(len(payload)))
	b.ResetTimer()
	cpu := processCPU(b)
	start := time.Now()
	runShares(b, conns, func(i, share int) error {
		return sendFloor(streams[i], chunk, perChunk, share, len(payload))
	})
	elapsed := time.Since(start)
	rate := float64(b.N) / elapsed.Seconds()
	b.ReportMetric(rate, "records/s")
	floorCPU := float64((processCPU(b) - cpu).Microseconds()) / float64(b.N)
	b.ReportMetric(floorCPU, "cpu-µs/record")
	rawRate, ok1 := medians.median(fmt.Sprintf("publish/raw/%d/rate", conns))
	rawCPU, ok2 := medians.median(fmt.Sprintf("publish/raw/%d/cpu", conns))
	if ok1 && ok2 {
		bound := float64(runtime.GOMAXPROCS(0)) * 1e6 / (floorCPU + rawCPU)
		b.ReportMetric(bound/rawRate, "bound/raw")
	}
}

// sendFloor writes records records of size bytes on s, in chunks, then closes its side and
// reads the answers to the end.
func sendFloor(s *quic.Stream, chunk []byte, perChunk, records, size int) error {
	answers := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, s)
		answers <- err
	}()
	for records > 0 {
		n := min(records, perChunk)
		if _, err := s.Write(chunk[:n*size]); err != nil {
			return err
		}
		records -= n
	}
	if err := s.Close(); err != nil {
		return err
	}
	return <-answers
}

// serveFloorSink reads s to its end, answering 16 bytes per 64 KiB read and at the end.
func serveFloorSink(s *quic.Stream) {
	buf := make([]byte, floorChunk)
	var ack [16]byte
	for {
		_, err := io.ReadFull(s, buf)
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
			s.CancelRead(1)
			s.CancelWrite(1)
			return
		}
		if _, werr := s.Write(ack[:]); werr != nil {
			return
		}
		if err != nil { // the end of the stream
			s.Close()
			return
		}
	}
}

// startFloor serves QUIC on loopback (TLS 1.3, the node's default stream and connection
// windows) with serve on every stream a client opens, and dials conns connections with one
// stream each. Everything is closed when the benchmark ends.
func startFloor(b *testing.B, conns int, serve func(*quic.Stream)) []*quic.Stream {
	b.Helper()
	streams := make([]*quic.Stream, conns)
	for i, c := range startFloorConns(b, conns, serve) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var err error
		streams[i], err = c.OpenStreamSync(ctx)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
	}
	return streams
}

// startFloorConns is startFloor's server and conns client connections without streams.
func startFloorConns(b *testing.B, conns int, serve func(*quic.Stream)) []*quic.Conn {
	b.Helper()
	cert, roots := selfSigned(b)
	qconf := &quic.Config{
		MaxIncomingStreams:             1000,
		InitialStreamReceiveWindow:     256 << 10,
		MaxStreamReceiveWindow:         1 << 20,
		InitialConnectionReceiveWindow: 1 << 20,
		MaxConnectionReceiveWindow:     16 << 20,
		MaxIdleTimeout:                 30 * time.Second,
	}
	ln, err := quic.ListenAddr("127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13, NextProtos: []string{"floor"},
	}, qconf)
	if err != nil {
		b.Fatal(err)
	}
	var served sync.WaitGroup
	served.Add(1)
	go func() {
		defer served.Done()
		for {
			c, err := ln.Accept(context.Background())
			if err != nil {
				return // closed by Cleanup
			}
			served.Add(1)
			go func() {
				defer served.Done()
				serveFloorConn(c, serve)
			}()
		}
	}()
	var dialed []*quic.Conn
	b.Cleanup(func() {
		for _, c := range dialed {
			c.CloseWithError(0, "")
		}
		ln.Close()
		served.Wait()
	})
	clientTLS := &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS13, NextProtos: []string{"floor"}}
	for range conns {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := quic.DialAddr(ctx, ln.Addr().String(), clientTLS, qconf)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		dialed = append(dialed, c)
	}
	return dialed
}

// serveFloorConn runs serve on every stream of c until c ends.
func serveFloorConn(c *quic.Conn, serve func(*quic.Stream)) {
	var streams sync.WaitGroup
	defer func() {
		c.CloseWithError(0, "")
		streams.Wait()
	}()
	for {
		s, err := c.AcceptStream(context.Background())
		if err != nil {
			return
		}
		streams.Add(1)
		go func() {
			defer streams.Done()
			serve(s)
		}()
	}
}

// benchQUICReplayFloor measures the transport alone under a replay: one QUIC connection on
// loopback, the server writing count records of size bytes each (payload only, no framing)
// in 256 KiB writes on the client's stream, the client reading them all. Like the publish
// floor it reports "bound/raw", the highest node/raw ratio GOMAXPROCS fully busy cores could
// reach if a replay cost nothing beyond this transport and the raw scan's own work:
// GOMAXPROCS / (floor + raw scan cpu-µs per record) against the raw scan's rate (medians of
// the same run), and the same bound against itself, "bound/quic" = floor / (floor + raw scan
// cpu-µs per record): what node/subscribe could reach against this leaf when the cores are
// busy, if it cost nothing beyond the transport and the raw scan. "node/quic" is
// node/subscribe's median rate of the run over this leaf's.
func benchQUICReplayFloor(b *testing.B, count, size int) {
	s := startFloor(b, 1, serveFloorSource)[0]
	var req [8]byte
	binary.BigEndian.PutUint32(req[:4], uint32(count))
	binary.BigEndian.PutUint32(req[4:], uint32(size))
	buf := make([]byte, 256<<10)
	b.SetBytes(int64(count) * int64(size))
	b.ResetTimer()
	cpu := processCPU(b)
	start := time.Now()
	for range b.N {
		if _, err := s.Write(req[:]); err != nil {
			b.Fatal(err)
		}
		for left := count * size; left > 0; {
			n, err := io.ReadFull(s, buf[:min(left, len(buf))])
			if err != nil {
				b.Fatalf("%d bytes short: %v", left, err)
			}
			left -= n
		}
	}
	rate := float64(count) * float64(b.N) / time.Since(start).Seconds()
	b.StopTimer()
	b.ReportMetric(rate, "records/s")
	floorCPU := float64((processCPU(b) - cpu).Microseconds()) / (float64(count) * float64(b.N))
	b.ReportMetric(floorCPU, "cpu-µs/record")
	rawRate, ok1 := medians.median("replay/raw")
	rawCPU, ok2 := medians.median("replay/raw/cpu")
	if ok1 && ok2 {
		bound := float64(runtime.GOMAXPROCS(0)) * 1e6 / (floorCPU + rawCPU)
		b.ReportMetric(bound/rawRate, "bound/raw")
		// The same bound against this leaf: a replay that keeps the cores busy cannot beat
		// the transport by more than the raw scan's CPU lets it.
		b.ReportMetric(floorCPU/(floorCPU+rawCPU), "bound/quic")
	}
	if nodeRate, ok := medians.median("replay"); ok {
		b.ReportMetric(nodeRate/rate, "node/quic")
	}
}

// serveFloorSource answers each request on s (record count and size, uint32 each) with that
// many bytes, until the client closes its side.
func serveFloorSource(s *quic.Stream) {
	defer s.Close()
	chunk := make([]byte, 256<<10)
	var req [8]byte
	for {
		if _, err := io.ReadFull(s, req[:]); err != nil {
			return
		}
		for left := int(binary.BigEndian.Uint32(req[:4])) * int(binary.BigEndian.Uint32(req[4:])); left > 0; {
			n, err := s.Write(chunk[:min(left, len(chunk))])
			if err != nil {
				return
			}
			left -= n
		}
	}
}
