package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	httppprof "net/http/pprof"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/quicmq/quicmq/node"
)

// Broker addresses inside a scenario's own network namespace (nothing else listens there).
const (
	quicmqAddr = "127.0.0.1:7400"
	natsAddr   = "127.0.0.1:4222"
)

// runBroker is the hidden "broker" command: a QuicMQ node or a NATS server in this process,
// which a worker starts as its child so that the broker's CPU, memory and GC are its own. It
// prints "READY" on stdout once clients may connect and runs until stdin closes or SIGTERM.
func runBroker(args []string) error {
	fs := flag.NewFlagSet("broker", flag.ExitOnError)
	kind := fs.String("kind", "quicmq", "quicmq, nats or quic-only (fanfloor.go)")
	dir := fs.String("dir", "", "data directory")
	js := fs.Bool("jetstream", false, "nats: enable JetStream (file storage in --dir)")
	syncAlways := fs.Bool("sync-always", false, "nats: JetStream fsyncs every write before acking")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the broker's life to this file")
	metrics := fs.String("metrics", "", "quicmq: serve the node's Prometheus metrics on this address (host:port)")
	// A node of a mesh (idlemirror.go); the defaults are the lone node every scenario measures.
	listen := fs.String("listen", quicmqAddr, "quicmq: the node's QUIC address")
	advertise := fs.String("advertise", "", "quicmq: the QUIC address other nodes dial (default --listen)")
	name := fs.String("name", "bench", "quicmq: node name")
	region := fs.String("region", "bench", "quicmq: region")
	gossipLAN := fs.String("gossip", "", "quicmq: HOST:PORT of the region's gossip pool (empty: no gossip, no federation)")
	gossipWAN := fs.String("wan", "", "quicmq: HOST:PORT of the gossip pool across regions")
	wanJoin := fs.String("wan-join", "", "quicmq: WAN gossip address of a node of another region to join")
	mirror := fs.String("mirror", "", "quicmq: a topic pattern mirrored from every other region")
	caDir := fs.String("ca-dir", "", "quicmq: the mesh's CA directory, shared by its nodes (default DIR/tls)")
	fs.Parse(args)
	if *cpuProfile != "" {
		stopProfile, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() { // the worker closes our stdin when it is done (or dies)
		io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	switch *kind {
	case "quicmq":
		cfg := node.Config{
			DataDir: *dir, Listen: *listen, Advertise: *advertise, Name: *name, Region: *region,
			GossipLAN: *gossipLAN, GossipWAN: *gossipWAN, CADir: *caDir,
			AblationSharedStream: true, // the client decides per connection
			Logger:               slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		}
		if *wanJoin != "" {
			cfg.WANJoin = []string{*wanJoin}
		}
		if *mirror != "" {
			cfg.Mirror = []string{*mirror}
		}
		n, err := node.New(cfg)
		if err != nil {
			return err
		}
		if *metrics != "" {
			// The node's metrics, and Go's runtime profiles beside them (heap, goroutines:
			// what idle mirrored topics cost the node, idlemirror.go).
			mux := http.NewServeMux()
			mux.Handle("/metrics", n.MetricsHandler())
			mux.HandleFunc("/debug/pprof/", httppprof.Index)
			mux.HandleFunc("/debug/pprof/profile", httppprof.Profile)
			go http.ListenAndServe(*metrics, mux)
		}
		done := make(chan error, 1)
		go func() { done <- n.Run(ctx) }()
		fmt.Println("READY")
		return <-done
	case "quic-only":
		return serveFloor(ctx, *dir)
	case "nats":
		return serveNATS(ctx, &server.Options{
			Host: "127.0.0.1", Port: 4222, NoSigs: true, NoLog: true,
			JetStream: *js, StoreDir: *dir, SyncAlways: *syncAlways,
		})
	}
	return fmt.Errorf("unknown broker kind %q", *kind)
}

// startCPUProfile profiles this process into the file path until stop.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// serveNATS runs a NATS server with opts, prints READY once it takes connections, and
// shuts it down when ctx ends.
func serveNATS(ctx context.Context, opts *server.Options) error {
	s, err := server.NewServer(opts)
	if err != nil {
		return err
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		return errors.New("nats server not ready within 10 s")
	}
	fmt.Println("READY")
	<-ctx.Done()
	s.Shutdown()
	s.WaitForShutdown()
	return nil
}

// brokerProc is a running broker child.
type brokerProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	dir   string
}

// startBroker starts this binary's "broker" command as a child (in the caller's network
// namespace) and waits for READY.
func startBroker(kind string, extra ...string) (*brokerProc, error) {
	return startChild(kind, func(dir string) []string {
		return append([]string{"broker", "--kind", kind, "--dir", filepath.Join(dir, "data")}, extra...)
	})
}

// startChild starts this binary with the arguments args returns for a new temporary
// directory (removed by stop) as a broker child, and waits until it prints READY.
func startChild(what string, args func(dir string) []string) (*brokerProc, error) {
	return startChildIn("", what, args)
}

// startChildIn is startChild in the network namespace ns ("" is the caller's).
func startChildIn(ns, what string, args func(dir string) []string) (*brokerProc, error) {
	dir, err := os.MkdirTemp("", "qmqbench-broker-")
	if err != nil {
		return nil, err
	}
	a := args(dir)
	cmd := exec.Command("/proc/self/exe", a...)
	if ns != "" { // ip execs the command: the child is still this process's, Pdeathsig holds
		self, err := os.Executable()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		cmd = exec.Command("ip", append([]string{"netns", "exec", ns, self}, a...)...)
	}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	b := &brokerProc{cmd: cmd, stdin: stdin, dir: dir}
	ready := make(chan error, 1)
	go func() {
		buf := make([]byte, 64)
		n, err := io.ReadAtLeast(out, buf, 5)
		if err == nil && !strings.HasPrefix(string(buf[:n]), "READY") {
			err = fmt.Errorf("broker said %q", buf[:n])
		}
		ready <- err
		io.Copy(io.Discard, out)
	}()
	select {
	case err = <-ready:
	case <-time.After(30 * time.Second):
		err = errors.New("broker not ready within 30 s")
	}
	if err != nil {
		b.stop()
		return nil, fmt.Errorf("start %s broker: %w", what, err)
	}
	return b, nil
}

func (b *brokerProc) pid() int { return b.cmd.Process.Pid }

// stop asks the broker to end (stdin closed), kills it after 10 s, removes its data.
func (b *brokerProc) stop() {
	b.stdin.Close()
	done := make(chan struct{})
	go func() { b.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		b.cmd.Process.Kill()
		<-done
	}
	os.RemoveAll(b.dir)
}

// rssPeaks samples the resident memory of the processes pids every interval from now until
// stop, which returns each one's peak in MiB.
func rssPeaks(every time.Duration, pids ...int) (stop func() []float64) {
	peaks := make([]float64, len(pids))
	sample := func() {
		for i, pid := range pids {
			peaks[i] = max(peaks[i], rssMiB(pid))
		}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			sample()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() []float64 {
		close(done)
		wg.Wait()
		sample()
		return peaks
	}
}

// rssMiB reads a process's resident set size from /proc.
func rssMiB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			var kb float64
			fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(l, "VmRSS:")), "%f", &kb)
			return kb / 1024
		}
	}
	return 0
}
