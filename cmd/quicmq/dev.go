package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/node"
)

func init() {
	register("dev", "run a local mesh: three regions, one node each, in one process, data in a temporary directory", runDev)
}

// runDev starts the local mesh and prints its banner. Long by design: a start-up script,
// step after step (flags, the regions and their nodes' configurations, the banner, serving).
func runDev(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "dev", "[--regions eu,us,ap] [--nodes N] [--replicas R] [--listen HOST:PORT] [--metrics HOST:PORT] [--data DIR] [--keep]")
	var f nodeFlags
	f.register(fs, false)
	listen := fs.String("listen", "127.0.0.1:7400", "QUIC address of the first region's node; the others take the next ports (port 0: any free ports)")
	metrics := fs.String("metrics", "127.0.0.1:9400", "metrics and admin address of the first node; the others take the next ports (empty: off)")
	data := fs.String("data", "", "data directory, kept on exit: a later 'quicmq dev --data DIR' resumes its topics\n"+
		"(default: a new temporary directory, removed on exit unless --keep)")
	regions := fs.String("regions", "eu,us,ap", "comma-separated regions")
	perRegion := fs.Int("nodes", 1, "nodes per region (2 or more: each topic lives on one of them, the others relay; 3 or more: replicated regions, each topic on 3 of them, see --replicas)")
	keep := fs.Bool("keep", false, "keep the temporary data directory on exit (a --data directory is always kept)")
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
	dataNote := "(kept on exit: --data; started again with it, dev resumes its topics)"
	if *data == "" {
		dir, err := os.MkdirTemp("", "quicmq-dev-")
		if err != nil {
			return err
		}
		*data = dir
		dataNote = "(a new temporary directory, kept on exit: --keep)"
		if !*keep {
			dataNote = "(a new temporary directory, removed on exit; --keep keeps it, --data DIR uses DIR)"
			defer os.RemoveAll(dir)
		}
	}
	// Replicated regions when each has three nodes or more: replicas = min(N, 3), unless
	// --replicas says otherwise.
	replicas := 1
	if *perRegion >= 3 {
		replicas = 3
	}
	fs.Visit(func(fl *flag.Flag) {
		if fl.Name == "replicas" {
			replicas = f.replicas
		}
	})
	if replicas < 1 || replicas > *perRegion || replicas > node.MaxReplicas {
		return usageError("--replicas %d: want 1 to %d (at most --nodes)", replicas, min(*perRegion, node.MaxReplicas))
	}
	f.replicas = 1 // checked here: the nodes' gossip addresses are set below
	base, err := f.config(e)
	if err != nil {
		return err
	}
	base.Replicas = replicas
	var clientToken string // a client token file the suggested commands use, with --token-file
	if f.tokenFile != "" {
		if clientToken, err = writeClientToken(f.tokenFile, *data); err != nil {
			return err
		}
	}
	nodes, err := newDevNodes(base, names, *perRegion, *listen, *metrics, *data)
	if err != nil {
		return err
	}

	banner := func(nodes []served) {
		printBanner(e.stdout, devBanner{
			nodes: nodes, regions: names, perRegion: *perRegion, data: *data, dataNote: dataNote,
			tokenFile: clientToken, tokenSource: f.tokenFile, bin: invocation(), replicas: replicas,
		})
	}
	return serveNodes(ctx, e, banner, nodes...)
}

// newDevNodes makes the dev mesh's nodes from base: perRegion in each region of names, the
// first node's QUIC and metrics addresses listen and metrics and the next nodes' the next
// ports, each node's data under data/REGION[/N], gossip joined over loopback within each
// region and across the regions made before it.
func newDevNodes(base node.Config, names []string, perRegion int, listen, metrics, data string) ([]served, error) {
	var nodes []served
	var wan []string
	for ri, r := range names {
		var lan []string
		for j := range perRegion {
			i := ri*perRegion + j
			addr, err := nthPort(listen, i)
			if err != nil {
				return nil, usageError("--listen: %v", err)
			}
			maddr := ""
			if metrics != "" {
				if maddr, err = nthPort(metrics, i); err != nil {
					return nil, usageError("--metrics: %v", err)
				}
			}
			cfg := base
			cfg.DataDir = filepath.Join(data, r)
			cfg.Name = "dev-" + r
			if perRegion > 1 {
				cfg.DataDir = filepath.Join(data, r, strconv.Itoa(j+1))
				cfg.Name = fmt.Sprintf("dev-%s-%d", r, j+1)
			}
			cfg.CADir = filepath.Join(data, "ca")
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
				return nil, err
			}
			lan = append(lan, n.Gossip().LANAddr())
			wan = append(wan, n.Gossip().WANAddr())
			nodes = append(nodes, served{node: n, metrics: maddr})
		}
	}
	return nodes, nil
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
