package main

// The bound under issue 15's publish figure: what the node's process spends only to receive a
// publish's bytes. A QUIC sink in a process of its own ("quicsink", a hidden command: the
// node's listener settings, TLS 1.3, reading every stream and answering 16 bytes per 64 KiB
// read, an ack's worth) takes the same records from the publishers' process, as many connections,
// the same window. Its CPU per record is the transport's share of the node's, which no broker
// on quic-go avoids; with raw Pebble's CPU per record it bounds the node/raw ratio from below:
// (sink + raw) / raw, reached only if the broker cost nothing else.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quicmq/quicmq/internal/certs"
)

// sinkChunk is the most the sink reads before it answers, and the most a sender writes at
// once: the body of one PUBLISH_BATCH frame (client/publish.go's maxBatchBody).
const sinkChunk = 64 << 10

// sinkWindow is the records a sender keeps unanswered, as the publish scenario's clients do.
const sinkWindow = 1024

// sinkQUICConfig is the node's listener configuration at its defaults (node.Node.quicConfig:
// a 1 MiB stream window starting at 256 KiB, a 16 MiB connection window starting at 1 MiB).
func sinkQUICConfig() *quic.Config {
	return &quic.Config{
		MaxIncomingStreams:             1000,
		MaxIncomingUniStreams:          -1,
		InitialStreamReceiveWindow:     256 << 10,
		MaxStreamReceiveWindow:         1 << 20,
		InitialConnectionReceiveWindow: 1 << 20,
		MaxConnectionReceiveWindow:     16 << 20,
		MaxIdleTimeout:                 30 * time.Second,
	}
}

// runQUICSink is the hidden "quicsink" command: it listens on loopback, prints its address
// on a line of its own and serves until its standard input closes.
func runQUICSink(args []string) error {
	fs := flag.NewFlagSet("quicsink", flag.ExitOnError)
	caDir := fs.String("ca", "", "directory of the CA that signs the sink's certificate (made if missing)")
	fs.Parse(args)
	if *caDir == "" || fs.NArg() > 0 {
		return fmt.Errorf("quicsink: want --ca DIR and no arguments, got %q", args)
	}
	serverTLS, err := sinkServerTLS(*caDir)
	if err != nil {
		return err
	}
	ln, err := quic.ListenAddr("127.0.0.1:0", serverTLS, sinkQUICConfig())
	if err != nil {
		return fmt.Errorf("quicsink: listen: %w", err)
	}
	fmt.Println(ln.Addr())
	go func() {
		io.Copy(io.Discard, os.Stdin)
		ln.Close()
	}()
	for {
		c, err := ln.Accept(context.Background())
		if err != nil {
			return nil // closed: the run is over
		}
		go func() {
			for {
				s, err := c.AcceptStream(context.Background())
				if err != nil {
					return
				}
				go sinkStream(s)
			}
		}()
	}
}

// sinkStream reads s to its end, answering 16 bytes per sinkChunk read and at the end (the
// node answers a PUBLISH_BATCH frame, at most sinkChunk of records, with one ack).
func sinkStream(s *quic.Stream) {
	buf := make([]byte, sinkChunk)
	var ack [16]byte
	for {
		_, err := io.ReadFull(s, buf)
		if _, werr := s.Write(ack[:]); werr != nil {
			return
		}
		if err != nil { // the end of the stream, or the connection's
			s.Close()
			return
		}
	}
}

// sinkServerTLS is the sink's TLS: a certificate for 127.0.0.1 signed by the CA in caDir
// (internal/certs, as a node issues its own), which the sender trusts as a client trusts a
// node's CA.
func sinkServerTLS(caDir string) (*tls.Config, error) {
	ca, _, err := certs.EnsureCA(caDir)
	if err != nil {
		return nil, fmt.Errorf("quicsink: CA: %w", err)
	}
	cert, err := ca.Issue("localhost", []string{"127.0.0.1"}, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return nil, fmt.Errorf("quicsink: certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13, NextProtos: []string{"quicsink"}}, nil
}

type sinkResult struct {
	Records int     // sent in the window
	Rate    float64 // records/s
	CPUus   float64 // the sink process's CPU (user + system) per record, µs
}

// startSink starts the quicsink child (this binary) with a CA of its own and returns it,
// its address and the roots that trust it; stop ends it and removes the CA.
func startSink() (cmd *exec.Cmd, addr string, roots *x509.CertPool, stop func(), err error) {
	caDir, err := os.MkdirTemp("", "qmqbench-quicsink-")
	if err != nil {
		return nil, "", nil, nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(caDir)
		}
	}()
	ca, _, err := certs.EnsureCA(caDir) // the sink issues its certificate from it
	if err != nil {
		return nil, "", nil, nil, fmt.Errorf("quicsink: CA: %w", err)
	}
	roots = x509.NewCertPool()
	roots.AddCert(ca.Cert)
	cmd = exec.Command("/proc/self/exe", "quicsink", "--ca", caDir)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, "", nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", nil, nil, err
	}
	if err = cmd.Start(); err != nil {
		return nil, "", nil, nil, fmt.Errorf("quicsink: %w", err)
	}
	stop = func() {
		stdin.Close()
		cmd.Wait()
		os.RemoveAll(caDir)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		stdin.Close()
		cmd.Wait()
		return nil, "", nil, nil, fmt.Errorf("quicsink: no address: %w", err)
	}
	return cmd, strings.TrimSpace(line), roots, stop, nil
}

// measureSink starts a sink process and sends it records of size bytes over conns
// connections (one stream each) for warmup and then the window d, as fast as the sink takes
// them, and returns the sink's CPU per record in the window. Like the benchmark's publishers
// each connection keeps a window of sinkWindow records unanswered, written sinkChunk at a
// time (a full PUBLISH_BATCH frame); the sink's answer per chunk opens the window again.
func measureSink(conns, size int, warmup, d time.Duration) (*sinkResult, error) {
	if conns < 1 || size < 1 || size > sinkChunk {
		return nil, fmt.Errorf("quicsink: %d connections, %d-byte records: want positive figures, records of at most %d bytes", conns, size, sinkChunk)
	}
	cmd, addr, roots, stopSink, err := startSink()
	if err != nil {
		return nil, err
	}
	defer stopSink()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clientTLS := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13, NextProtos: []string{"quicsink"}}
	streams := make([]*quic.Stream, conns)
	var dialed []*quic.Conn
	closeAll := func() { // ends a write blocked on flow control too
		for _, c := range dialed {
			c.CloseWithError(0, "")
		}
	}
	defer closeAll()
	for i := range streams {
		c, err := quic.DialAddr(ctx, addr, clientTLS, sinkQUICConfig())
		if err != nil {
			return nil, fmt.Errorf("quicsink: dial: %w", err)
		}
		dialed = append(dialed, c)
		if streams[i], err = c.OpenStreamSync(ctx); err != nil {
			return nil, fmt.Errorf("quicsink: open stream: %w", err)
		}
	}
	var sent atomic.Int64
	var counting atomic.Bool
	var failed atomic.Value
	var wg sync.WaitGroup
	perChunk := sinkChunk / size
	buf := make([]byte, perChunk*size)
	for _, s := range streams {
		window := make(chan struct{}, max(sinkWindow/perChunk, 1)) // chunks unanswered
		go func() {                                                // the answers, 16 bytes a chunk
			var ack [16]byte
			for {
				if _, err := io.ReadFull(s, ack[:]); err != nil {
					return
				}
				select {
				case <-window:
				default:
				}
			}
		}()
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case window <- struct{}{}:
				}
				if _, err := s.Write(buf); err != nil {
					if ctx.Err() == nil {
						failed.Store(err)
					}
					return
				}
				if counting.Load() {
					sent.Add(int64(perChunk))
				}
			}
		})
	}
	time.Sleep(warmup)
	cpu0, t0 := brokerCPU(cmd.Process.Pid), time.Now()
	counting.Store(true)
	time.Sleep(d)
	counting.Store(false)
	cpu1, el := brokerCPU(cmd.Process.Pid), time.Since(t0)
	cancel()
	closeAll()
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		return nil, fmt.Errorf("quicsink: write: %w", err)
	}
	res := &sinkResult{Records: int(sent.Load())}
	res.Rate = float64(res.Records) / el.Seconds()
	if res.Records == 0 {
		return nil, errors.New("quicsink: no record sent in the window")
	}
	res.CPUus = float64(cpu1-cpu0) / float64(time.Microsecond) / float64(res.Records)
	return res, nil
}
