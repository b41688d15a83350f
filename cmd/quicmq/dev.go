package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/node"
)

func init() {
	register("dev", "run a local mesh: three regions, one node each, in one process, data in a temporary directory", runDev)
}

func runDev(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "dev", "[--regions eu,us,ap] [--nodes N] [--listen HOST:PORT] [--metrics HOST:PORT] [--data DIR] [--keep]")
	var f nodeFlags
	f.register(fs, false)
	listen := fs.String("listen", "127.0.0.1:7400", "QUIC address of the first region's node; the others take the next ports (port 0: any free ports)")
	metrics := fs.String("metrics", "127.0.0.1:9400", "metrics and admin address of the first node; the others take the next ports (empty: off)")
	data := fs.String("data", "", "data directory (default: a new temporary directory)")
	regions := fs.String("regions", "eu,us,ap", "comma-separated regions")
	perRegion := fs.Int("nodes", 1, "nodes per region (2 or more: each topic lives on one of them, the others relay)")
	keep := fs.Bool("keep", false, "keep the temporary data directory on exit")
	// Three nodes logging at info would bury the banner that says how to connect.
	f.logLevel = "warn"
	fs.Lookup("log-level").DefValue = "warn"
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// The dev mesh is the one place anonymous clients are the default (the nodes say so).
	f.anonymous = f.tokens == "" && f.tokenFile == ""
	f.insecureGossip = f.gossipKey == "" && f.gossipKeyFile == "" // loopback only
	f.adminAPI = true
	names := splitList(*regions)
	if len(names) == 0 {
		return usageError("--regions: name at least one region")
	}
	if *perRegion < 1 || *perRegion > 16 {
		return usageError("--nodes %d: want 1 to 16 nodes per region", *perRegion)
	}
	if *data == "" {
		dir, err := os.MkdirTemp("", "quicmq-dev-")
		if err != nil {
			return err
		}
		*data = dir
		if !*keep {
			defer os.RemoveAll(dir)
		}
	}
	base, err := f.config(e)
	if err != nil {
		return err
	}
	var nodes []served
	var wan []string
	for ri, r := range names {
		var lan []string
		for j := range *perRegion {
			i := ri**perRegion + j
			addr, err := nthPort(*listen, i)
			if err != nil {
				return usageError("--listen: %v", err)
			}
			maddr := ""
			if *metrics != "" {
				if maddr, err = nthPort(*metrics, i); err != nil {
					return usageError("--metrics: %v", err)
				}
			}
			cfg := base
			cfg.DataDir = filepath.Join(*data, r)
			cfg.Name = "dev-" + r
			if *perRegion > 1 {
				cfg.DataDir = filepath.Join(*data, r, strconv.Itoa(j+1))
				cfg.Name = fmt.Sprintf("dev-%s-%d", r, j+1)
			}
			cfg.CADir = filepath.Join(*data, "ca")
			cfg.Listen = addr
			cfg.Region = r
			cfg.GossipLAN = "127.0.0.1:0"
			cfg.GossipWAN = "127.0.0.1:0"
			cfg.GossipProfile = gossip.ProfileLocal
			cfg.Join = lan
			cfg.WANJoin = wan
			cfg.Logger = cfg.Logger.With("dev_node", cfg.Name)
			n, err := node.New(cfg)
			if err != nil {
				for _, s := range nodes {
					s.node.Close()
				}
				return err
			}
			lan = append(lan, n.Gossip().LANAddr())
			wan = append(wan, n.Gossip().WANAddr())
			nodes = append(nodes, served{node: n, metrics: maddr})
		}
	}

	banner := func(nodes []served) {
		ca := nodes[0].node.CAFile()
		each := "one node each"
		if *perRegion > 1 {
			each = fmt.Sprintf("%d nodes each (a topic lives on one of them; the others relay)", *perRegion)
		}
		fmt.Fprintf(e.stdout, "QuicMQ dev mesh is up: %d regions, %s, joined over WAN gossip.\n", len(names), each)
		for _, s := range nodes {
			admin := ""
			if s.metrics != "" {
				admin = "  metrics/admin http://" + s.metrics
			}
			fmt.Fprintf(e.stdout, "  region %-6s node %-10s %s%s\n", s.node.Region(), s.node.Name(), s.node.Addr(), admin)
		}
		// The hints name every node of the first and the last region: a client given a
		// region's nodes moves to the next one when its node is lost (--reconnect).
		region := func(r string) string {
			var addrs []string
			for _, s := range nodes {
				if s.node.Region() == r {
					addrs = append(addrs, s.node.Addr().String())
				}
			}
			return strings.Join(addrs, ",")
		}
		a, b := region(nodes[0].node.Region()), region(nodes[len(nodes)-1].node.Region())
		reconnect := ""
		if *perRegion > 1 {
			reconnect = " --reconnect"
		}
		fmt.Fprintf(e.stdout, `  data %s%s
  CA   %s

Try, in other terminals (records published in one region reach subscribers in every region):
  quicmq sub --server %s --ca %s --topic 'demo.>'%s
  echo hello | quicmq pub --server %s --ca %s --topic demo.hello%s
  quicmq topics --server %s --ca %s
`, *data, tempNote(*keep), ca, b, ca, reconnect, a, ca, reconnect, b, ca)
		if *metrics != "" {
			fmt.Fprintf(e.stdout, "  quicmq members --admin %s\n  quicmq links --admin %s\n", nodes[0].metrics, nodes[0].metrics)
		}
		fmt.Fprintln(e.stdout, "\nPress Ctrl-C to stop.")
	}
	return serveNodes(ctx, e, banner, nodes...)
}

// nthPort returns addr with its port increased by i (port 0 stays 0).
func nthPort(addr string, i int) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p+i > 65535 {
		return "", fmt.Errorf("bad port %q", port)
	}
	if p == 0 {
		return addr, nil
	}
	return net.JoinHostPort(host, strconv.Itoa(p+i)), nil
}

func tempNote(keep bool) string {
	if keep {
		return " (kept on exit)"
	}
	return " (removed on exit; --keep keeps it)"
}
