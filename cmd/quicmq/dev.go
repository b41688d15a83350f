package main

import (
	"context"
	"fmt"
	"os"

	"github.com/quicmq/quicmq/node"
)

func init() {
	register("dev", "run a local development broker with data in a temporary directory", runDev)
}

func runDev(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "dev", "[--listen HOST:PORT] [--metrics HOST:PORT] [--data DIR] [--keep]")
	var f nodeFlags
	f.register(fs, true)
	keep := fs.Bool("keep", false, "keep the temporary data directory on exit")
	fs.Lookup("metrics").DefValue = "127.0.0.1:9400"
	f.metrics = "127.0.0.1:9400"
	f.region = "dev"
	f.name = "dev-1"
	fs.Lookup("region").DefValue = "dev"
	fs.Lookup("name").DefValue = "dev-1"
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if f.data == "" {
		dir, err := os.MkdirTemp("", "quicmq-dev-")
		if err != nil {
			return err
		}
		f.data = dir
		if !*keep {
			defer os.RemoveAll(dir)
		}
	}
	cfg, err := f.config(e)
	if err != nil {
		return err
	}
	n, err := node.New(cfg)
	if err != nil {
		return err
	}
	addr := n.Addr().String()
	fmt.Fprintf(e.stdout, `QuicMQ dev node %q (region %q) is up.
  listening  %s (QUIC)
  data       %s%s
  CA         %s

Try, in another terminal:
  echo hello | quicmq pub --server %s --ca %s --topic demo.hello
  quicmq sub --server %s --ca %s --topic 'demo.>' --from earliest
  quicmq topics --server %s --ca %s

Press Ctrl-C to stop.
`, cfg.Name, cfg.Region, addr, f.data, tempNote(*keep), n.CAFile(), addr, n.CAFile(), addr, n.CAFile(), addr, n.CAFile())
	return serveNodes(ctx, e, f.metrics, n)
}

func tempNote(keep bool) string {
	if keep {
		return " (kept on exit)"
	}
	return " (removed on exit; --keep keeps it)"
}
