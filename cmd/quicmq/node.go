package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/quicmq/quicmq/node"
	"github.com/quicmq/quicmq/wal"
)

func init() {
	register("node", "run a broker node", runNode)
}

// nodeFlags are the flags that configure a node, shared by node and dev.
type nodeFlags struct {
	data, listen, metrics, region, name string
	tokens, tokenFile                   string
	retentionAge                        time.Duration
	retentionBytes                      int64
	maxPayload                          int
	logLevel                            string
}

func (f *nodeFlags) register(fs *flag.FlagSet, withData bool) {
	if withData {
		fs.StringVar(&f.data, "data", "", "data directory: the log (DATA/log) and generated TLS material (DATA/tls) (required)")
		fs.StringVar(&f.listen, "listen", "127.0.0.1:7400", "UDP address of the QUIC client listener (port 0: any free port)")
		fs.StringVar(&f.metrics, "metrics", "", "HTTP address for Prometheus metrics at /metrics, e.g. 127.0.0.1:9400 (empty: off)")
		fs.StringVar(&f.region, "region", "local", "region this node belongs to")
		fs.StringVar(&f.name, "name", "", "node name (default: the host name)")
	}
	fs.StringVar(&f.tokens, "tokens", "", "comma-separated client tokens (16+ characters each); empty: anonymous clients allowed")
	fs.StringVar(&f.tokenFile, "token-file", "", "file with one client token per line (added to --tokens)")
	fs.DurationVar(&f.retentionAge, "retention-age", 0, "delete records older than this, per topic (0: keep forever)")
	fs.Int64Var(&f.retentionBytes, "retention-bytes", 0, "keep at most this many bytes per topic, oldest deleted first (0: no limit)")
	fs.IntVar(&f.maxPayload, "max-payload", 1<<20, "largest record payload in bytes")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
}

func (f *nodeFlags) config(e *env) (node.Config, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return node.Config{}, usageError("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	var tokens []string
	for _, t := range strings.Split(f.tokens, ",") {
		if t = strings.TrimSpace(t); t != "" {
			tokens = append(tokens, t)
		}
	}
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return node.Config{}, fmt.Errorf("--token-file: %w", err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
				tokens = append(tokens, t)
			}
		}
	}
	if f.retentionAge < 0 || f.retentionBytes < 0 {
		return node.Config{}, usageError("--retention-age and --retention-bytes must not be negative")
	}
	if f.maxPayload <= 0 {
		return node.Config{}, usageError("--max-payload must be positive, got %d", f.maxPayload)
	}
	return node.Config{
		DataDir:    f.data,
		Listen:     f.listen,
		Name:       f.name,
		Region:     f.region,
		Tokens:     tokens,
		MaxPayload: f.maxPayload,
		Retention:  wal.Retention{MaxAge: f.retentionAge, MaxBytes: f.retentionBytes},
		Logger:     slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level})),
	}, nil
}

func runNode(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "node", "--data DIR [--listen HOST:PORT] [--metrics HOST:PORT] [flags]")
	var f nodeFlags
	f.register(fs, true)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if f.data == "" {
		return usageError("--data is required: the directory where this node keeps its log and certificates")
	}
	cfg, err := f.config(e)
	if err != nil {
		return err
	}
	n, err := node.New(cfg)
	if err != nil {
		return err
	}
	return serveNodes(ctx, e, f.metrics, n)
}

// serveNodes runs the nodes (and a metrics endpoint for the first, if addr is set) until ctx
// ends, then stops them all.
func serveNodes(ctx context.Context, e *env, metricsAddr string, nodes ...*node.Node) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(nodes)+1)
	for _, n := range nodes {
		go func() { errs <- n.Run(ctx) }()
	}
	var srv *http.Server
	if metricsAddr != "" {
		ln, err := net.Listen("tcp", metricsAddr)
		if err != nil {
			cancel()
			for range nodes {
				<-errs
			}
			return fmt.Errorf("--metrics %s: %w", metricsAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", nodes[0].MetricsHandler())
		srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		fmt.Fprintf(e.stderr, "metrics on http://%s/metrics\n", ln.Addr())
	}
	var first error
	for range nodes {
		if err := <-errs; err != nil && first == nil {
			first = err
			cancel() // one node failed: stop the others
		}
	}
	if srv != nil {
		sctx, scancel := context.WithTimeout(context.Background(), time.Second)
		srv.Shutdown(sctx)
		scancel()
	}
	if errors.Is(first, context.Canceled) {
		first = nil
	}
	return first
}
