package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/quicmq/quicmq/internal/config"
	"github.com/quicmq/quicmq/internal/timeline"
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
	retentionInterval                   time.Duration
	mirrorStallAfter                    time.Duration
	mirrorStreams                       int
	retentionBytes                      int64
	maxPayload                          int
	maxDurablesPerTenant                int
	replicas                            int
	raftNoQuiesce                       bool
	raftNoCompaction                    bool
	raftTick                            time.Duration
	raftGroupsPerNode                   int
	raftGroupPerTopic                   bool
	raftPredictPlacement                bool
	raftBalance, raftStopHandOff        time.Duration
	raftNoBalance                       bool
	raftMoves                           int
	raftNoReplicaBalance                bool
	replaceAfter                        time.Duration
	logLevel                            string
	caDir, advertise                    string
	gossipLAN, gossipWAN                string
	gossipAdvertise, wanAdvertise       string
	join, wanJoin, gossipKey, mirror    string
	configFile, gossipKeyFile           string
	anonymous, insecureGossip           bool
	certFile, keyFile, caBundle         string
	admin                               string
	adminAPI                            bool
	pprof                               bool
	noFiles                             bool // config check --no-files: the TLS files are not read
	ablationSharedStream                bool
	ablationSharedLink                  bool
}

func (f *nodeFlags) register(fs *flag.FlagSet, withData bool) {
	if withData {
		fs.StringVar(&f.data, "data", "", "data directory: the log (DATA/log) and generated TLS material (DATA/tls) (required)")
		fs.StringVar(&f.listen, "listen", "127.0.0.1:7400", "UDP address of the QUIC client listener (port 0: any free port)")
		fs.StringVar(&f.metrics, "metrics", "", "HTTP address of /metrics (Prometheus), and of the admin API /v1/ unless --admin is given, e.g. 127.0.0.1:9400 (empty: off)")
		fs.StringVar(&f.admin, "admin", "", "HTTP address of the admin API /v1/ (members, links, migrate, gossip keys), apart from --metrics; operators only, e.g. 127.0.0.1:9500")
		fs.BoolVar(&f.pprof, "pprof", false, "serve Go's runtime profiles (net/http/pprof) at /debug/pprof/ on the --metrics address, e.g. 'go tool pprof http://127.0.0.1:9400/debug/pprof/profile?seconds=10'; operators only")
		fs.BoolVar(&f.adminAPI, "admin-api", false, "serve the admin API's state-changing endpoints (links --migrate, gossip-keys install/use/remove); off: they are refused with 403")
		fs.StringVar(&f.region, "region", "local", "region this node belongs to")
		fs.StringVar(&f.name, "name", "", "node name (default: the host name)")
		fs.StringVar(&f.caDir, "ca-dir", "", "the mesh CA directory (ca.pem + ca-key.pem), created if absent; every node started with the same directory trusts the others (default DATA/tls)")
		fs.StringVar(&f.certFile, "cert", "", "the node's certificate (PEM, from 'quicmq certs node'); with --key, the node needs no CA key")
		fs.StringVar(&f.keyFile, "key", "", "the key of --cert (PEM)")
		fs.StringVar(&f.caBundle, "ca-bundle", "", "PEM file of the CAs trusted for peers and client certificates (default CA-DIR/ca.pem); old + new CA during a CA rotation")
		fs.StringVar(&f.advertise, "advertise", "", "QUIC address other nodes dial (default: the --listen address)")
		fs.StringVar(&f.gossipLAN, "gossip", "", "HOST:PORT of the region's gossip pool (LAN); empty: a standalone node")
		fs.StringVar(&f.gossipWAN, "wan", "", "HOST:PORT of the gossip pool across regions (WAN); needs --gossip")
		fs.StringVar(&f.gossipAdvertise, "gossip-advertise", "", "IP:PORT the region's nodes reach the LAN gossip pool at, if not the --gossip address (NAT)")
		fs.StringVar(&f.wanAdvertise, "wan-advertise", "", "IP:PORT other regions reach the WAN gossip pool at, if not the --wan address (e.g. a cloud's public IP)")
		fs.StringVar(&f.join, "join", "", "comma-separated gossip addresses of nodes of this region to join")
		fs.StringVar(&f.wanJoin, "wan-join", "", "comma-separated WAN gossip addresses of nodes of other regions to join")
		fs.StringVar(&f.gossipKey, "gossip-key", "", "base64 of the 32-byte key that encrypts gossip, the same on every node of the mesh")
		fs.DurationVar(&f.mirrorStallAfter, "mirror-stall-after", 0, "report a mirror as stalled (quicmq_mirror_stalled, a WARN) when it carries no record this long while the origin's head moves (0: 30s)")
		fs.IntVar(&f.mirrorStreams, "mirror-streams", 0, "mirror streams each link to another region keeps open at once: a mirror holds one only while its topic moves, quiet ones park and their origin's head reopens them; topics past the bound wait in turn (0: 1024)")
		fs.StringVar(&f.mirror, "mirror", "", "comma-separated topic patterns mirrored from every other region even without local subscribers")
		fs.StringVar(&f.gossipKeyFile, "gossip-key-file", "", "file holding the base64 gossip key (--gossip-key wins if both are set)")
		fs.BoolVar(&f.insecureGossip, "insecure-gossip", false, "gossip in plaintext, without --gossip-key (development only)")
		fs.StringVar(&f.configFile, "config", os.Getenv("QUICMQ_CONFIG"), "configuration file (HCL; see 'quicmq config check -h'); flags, then QUICMQ_* environment variables, override it (default $QUICMQ_CONFIG)")
	}
	fs.StringVar(&f.tokens, "tokens", "", "comma-separated client tokens (16+ characters each), each with full access")
	fs.StringVar(&f.tokenFile, "token-file", "", "file of client credentials, one a line: 'TOKEN' or 'cert:COMMON_NAME', then optional tenant=NAME publish=P,... subscribe=P,... ('-': nothing); see docs/security.md")
	fs.BoolVar(&f.anonymous, "anonymous", false, "accept any client that trusts the CA, without a token (development only; needed when no --tokens or --token-file is given)")
	fs.DurationVar(&f.retentionAge, "retention-age", 0, "delete records older than this, per topic (0: keep forever)")
	fs.Int64Var(&f.retentionBytes, "retention-bytes", 0, "keep at most this many bytes per topic, oldest deleted first (0: no limit)")
	fs.DurationVar(&f.retentionInterval, "retention-interval", 0, "how often retention deletes what --retention-age, --retention-bytes and topics' own retention no longer keep (0: 1m)")
	fs.IntVar(&f.maxPayload, "max-payload", 1<<20, "largest record payload in bytes")
	fs.IntVar(&f.maxDurablesPerTenant, "max-durables-per-tenant", 1000, "durable consumers a tenant may have stored on this node ('quicmq consumers rm' removes one)")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.BoolVar(&f.raftNoQuiesce, "raft-no-quiesce", false, "with --replicas > 1: keep idle raft groups heartbeating, so a leader's loss is noticed after the election timeout (1-2 s) rather than by gossip's failure detection (about 5 s), at one heartbeat per group per tick")
	fs.BoolVar(&f.raftNoCompaction, "raft-no-compaction", false, "with --replicas > 1: keep every raft entry forever instead of compacting the raft logs (a fallback: each record is then stored twice, and the raft log grows without bound)")
	fs.IntVar(&f.raftGroupsPerNode, "raft-groups-per-node", 0, "with --replicas > 1: raft groups per node holding the region's topics, many topics each; the metadata leader's value sizes the region's groups (0: two per core, at least 4)")
	fs.BoolVar(&f.raftPredictPlacement, "raft-predict-placement", false, "with --replicas > 1: relay a new topic's first publish at once to the leader of the group it will most likely be placed on, which waits for the placement (off: the publish waits for it here; for comparison)")
	fs.BoolVar(&f.raftGroupPerTopic, "raft-group-per-topic", false, "with --replicas > 1: place each new topic in a raft group of its own, the layout before groups held many topics (slower and costlier with many topics; for comparison)")
	fs.DurationVar(&f.raftTick, "raft-tick", 0, "with --replicas > 1: one raft tick; elections start 10-20 ticks after a leader's last heartbeat, heartbeats every tick (0: 50ms; raise it when the region's nodes are more than a few ms apart)")
	fs.DurationVar(&f.raftBalance, "raft-balance-interval", 0, "with --replicas > 1: how often at most this node hands one of its raft group leaderships to a replica leading two or more fewer, keeping leaders within one of even over the nodes up and not drained (0: 10s)")
	fs.BoolVar(&f.raftNoBalance, "raft-no-balance", false, "with --replicas > 1: turn this node's leader balancer off (leaders stay where elections and drains put them)")
	fs.IntVar(&f.raftMoves, "raft-moves", 0, "with --replicas > 1: replica moves in progress at once in the region (removals, replacements, the replica balancer), each a catch-up of one group on its new node; the metadata leader's value counts (0: 2)")
	fs.BoolVar(&f.raftNoReplicaBalance, "raft-no-replica-balance", false, "with --replicas > 1: turn the replica balancer off while this node leads the region's metadata (a node that joins then takes only new groups, not a share of those that exist)")
	fs.DurationVar(&f.replaceAfter, "replace-after", 0, "with --replicas > 1: remove as dead a node of the region down this long, re-creating its replicas on the other nodes, as 'quicmq nodes remove --dead' does (0: off; at least 1m; the metadata leader's value counts)")
	fs.DurationVar(&f.raftStopHandOff, "raft-stop-handoff", 0, "with --replicas > 1: how long a graceful stop (SIGTERM) waits for this node's raft leaderships to move to other replicas before it closes (0: 3s)")
	fs.IntVar(&f.replicas, "replicas", 1, "replicas of each new topic in this node's region, kept in agreement by raft: 1 (one node holds a topic), or 2 to 7 (odd recommended; the same on every node of the region, which forms once that many nodes are up)")
	fs.BoolVar(&f.ablationSharedLink, "ablation-shared-link", false, "measurement aid for benchmarks: carry all mirrors of each federation link on one shared stream, and accept that from peers (docs/benchmarks.md, scenario 6); never in production")
	fs.BoolVar(&f.ablationSharedStream, "ablation-shared-stream", false, "measurement aid for benchmarks: accept the shared-stream mapping, all of a connection's subscriptions on one stream, same authorization (docs/benchmarks.md); never in production")
}

// config is the node's Config from the flags and the QUICMQ_* environment. Long by design:
// a table of flag-to-setting assignments, one line or two each, in the flags' order.
func (f *nodeFlags) config(e *env) (node.Config, error) {
	// Every problem is collected, each naming its config key and flag (nodecheck.go), so
	// that 'quicmq config check' reports what 'quicmq node' would refuse, all at once.
	var probs problems
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		probs.add("log-level", "%q: want debug, info, warn or error", f.logLevel)
	}
	tokens, creds := f.credentials(&probs)
	if f.gossipLAN != "" && f.gossipKey == "" && f.gossipKeyFile == "" && !f.insecureGossip {
		probs.add("gossip-key", "%s is set without a gossip key: give %s or %s (the same 32-byte key on every node of the mesh), "+
			"or %s to gossip in plaintext (development only)", keyFlag("gossip"), keyFlag("gossip-key"), keyFlag("gossip-key-file"), keyFlag("insecure-gossip"))
	}
	if len(tokens) == 0 && len(creds) == 0 && !f.anonymous && f.tokenFile == "" {
		probs.add("tokens", "no client credentials: give %s or %s, or %s to accept any client that trusts the CA (development only)",
			keyFlag("tokens"), keyFlag("token-file"), keyFlag("anonymous"))
	}
	if f.anonymous && (len(tokens) > 0 || len(creds) > 0) {
		probs.add("anonymous", "excludes client credentials (%s, %s)", keyFlag("tokens"), keyFlag("token-file"))
	}
	if f.retentionAge < 0 {
		probs.add("retention-age", "must not be negative, got %v", f.retentionAge)
	}
	if f.retentionBytes < 0 {
		probs.add("retention-bytes", "must not be negative, got %d", f.retentionBytes)
	}
	if f.raftGroupsPerNode < 0 {
		probs.add("raft-groups-per-node", "must not be negative, got %d (%s places each topic in a group of its own)", f.raftGroupsPerNode, keyFlag("raft-group-per-topic"))
	}
	if f.raftMoves < 0 {
		probs.add("raft-moves", "must not be negative, got %d (0: the default, 2)", f.raftMoves)
	}
	if f.replaceAfter < 0 || f.replaceAfter > 0 && f.replaceAfter < time.Minute {
		probs.add("replace-after", "%v: want 0 (off) or at least 1m: a node restarting or rebooting is down for a while, and a node replaced leaves the region for good", f.replaceAfter)
	}
	if f.retentionInterval < 0 {
		probs.add("retention-interval", "must not be negative, got %v", f.retentionInterval)
	}
	if f.maxPayload <= 0 {
		probs.add("max-payload", "must be positive, got %d", f.maxPayload)
	}
	switch {
	case f.replicas < 1 || f.replicas > node.MaxReplicas:
		probs.add("replicas", "%d: want 1 to %d (odd recommended: 3 tolerates the loss of one node, 5 of two)", f.replicas, node.MaxReplicas)
	case f.replicas > 1 && f.gossipLAN == "":
		probs.add("replicas", "%d needs %s: a topic's replicas are nodes of one region, found by its gossip pool", f.replicas, keyFlag("gossip"))
	}
	key := f.gossipKeyBytes(&probs)
	if err := probs.err(); err != nil {
		return node.Config{}, err
	}
	return node.Config{
		DataDir:            f.data,
		Listen:             f.listen,
		Name:               f.name,
		Region:             f.region,
		Tokens:             tokens,
		Credentials:        creds,
		MaxPayload:         f.maxPayload,
		Retention:          wal.Retention{MaxAge: f.retentionAge, MaxBytes: f.retentionBytes},
		RetentionInterval:  f.retentionInterval,
		Logger:             slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level})),
		CADir:              f.caDir,
		CertFile:           f.certFile,
		KeyFile:            f.keyFile,
		CABundle:           f.caBundle,
		Advertise:          f.advertise,
		GossipAdvertiseLAN: f.gossipAdvertise, GossipAdvertiseWAN: f.wanAdvertise,
		GossipLAN: f.gossipLAN,
		GossipWAN: f.gossipWAN,
		Join:      splitList(f.join),
		WANJoin:   splitList(f.wanJoin),
		GossipKey: key,
		Mirror:    splitList(f.mirror),

		AdminAPI:         f.adminAPI,
		MirrorStallAfter: f.mirrorStallAfter,
		MirrorStreams:    f.mirrorStreams,

		MaxDurablesPerTenant: f.maxDurablesPerTenant,
		Replicas:             f.replicas,
		Raft: node.RaftSettings{DisableQuiescence: f.raftNoQuiesce, DisableLogCompaction: f.raftNoCompaction, TickInterval: f.raftTick, GroupsPerNode: groupsSetting(f.raftGroupsPerNode, f.raftGroupPerTopic), PredictPlacement: f.raftPredictPlacement,
			BalanceInterval: balanceSetting(f.raftBalance, f.raftNoBalance), StopHandOff: f.raftStopHandOff,
			Moves: f.raftMoves, DisableReplicaBalance: f.raftNoReplicaBalance, ReplaceAfter: f.replaceAfter},

		AblationSharedStream: f.ablationSharedStream,
		AblationSharedLink:   f.ablationSharedLink,
	}, nil
}

// credentials reads the client credentials of --tokens and --token-file, noting each problem
// in probs.
func (f *nodeFlags) credentials(probs *problems) (tokens []string, creds []node.Credential) {
	tokens = splitList(f.tokens)
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			probs.add("token-file", "%v", err)
		}
		parsed, bad := config.ParseCredentials(string(b))
		if err == nil && len(bad) > 0 {
			probs.add("token-file", "%s: %s", f.tokenFile, strings.Join(bad, "; "))
		}
		for _, c := range parsed {
			creds = append(creds, node.Credential{Token: c.Token, Subject: c.Subject, Tenant: c.Tenant, Publish: c.Publish, Subscribe: c.Subscribe})
		}
	}
	return tokens, creds
}

// gossipKeyBytes is the gossip key of --gossip-key or --gossip-key-file (nil: none), noting
// a problem in probs.
func (f *nodeFlags) gossipKeyBytes(probs *problems) []byte {
	var key []byte
	keySrc := "gossip-key"
	if f.gossipKey == "" && f.gossipKeyFile != "" {
		b, err := os.ReadFile(f.gossipKeyFile)
		if err != nil {
			probs.add("gossip-key-file", "%v", err)
		}
		f.gossipKey, keySrc = strings.TrimSpace(string(b)), "gossip-key-file"
	}
	if f.gossipKey != "" {
		k, err := base64.StdEncoding.DecodeString(f.gossipKey)
		if err != nil || len(k) != 32 {
			probs.add(keySrc, "want the base64 of 32 bytes (e.g. from 'head -c32 /dev/urandom | base64')")
		}
		key = k
	}
	return key
}

func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

func runNode(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "node", "--data DIR [--listen HOST:PORT] [--metrics HOST:PORT] [flags]")
	var f nodeFlags
	f.register(fs, true)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := applyConfig(fs, f.configFile); err != nil {
		return err
	}
	cfg, err := f.nodeConfig(e)
	if err != nil {
		return err
	}
	if f.pprof {
		cfg.Timeline = timeline.New(timelineEvents)
	}
	n, err := node.New(cfg)
	if err != nil {
		return err
	}
	return serveNodes(ctx, e, nil, served{node: n, metrics: f.metrics, admin: f.admin, pprof: f.pprof, timeline: cfg.Timeline})
}

// served is a node with the addresses of its metrics and admin endpoints ("" for none).
// Without a separate admin address the admin API is served with the metrics.
type served struct {
	node           *node.Node
	metrics, admin string
	pprof          bool // /debug/pprof/ on the metrics address
	// timeline, with pprof, is served at /debug/quicmq/timeline beside the profiles.
	timeline *timeline.Recorder
}

// timelineEvents is how many of the store's and raft's last events a node with --pprof
// keeps for /debug/quicmq/timeline (about 40 bytes each: a few seconds of a busy node).
const timelineEvents = 1 << 17

// withProfiles serves Go's runtime profiles at /debug/pprof/ beside h, and with tl the
// node's recent store and raft events at /debug/quicmq/timeline (JSON; ?since=Unix ns).
func withProfiles(h http.Handler, tl *timeline.Recorder) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	if tl != nil {
		mux.Handle("/debug/quicmq/timeline", tl)
	}
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// serveNodes runs the nodes and their metrics/admin endpoints until ctx ends, then stops them
// all. SIGUSR1 migrates every link of every node to a new local socket. The endpoints are
// bound first; then ready, if not nil, is given the nodes with the addresses bound (a port 0
// resolved), and the nodes start. Without ready each endpoint is announced on stderr.
func serveNodes(ctx context.Context, e *env, ready func([]served), nodes ...served) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	announce := func(format string, args ...any) {
		if ready == nil {
			fmt.Fprintf(e.stderr, format, args...)
		}
	}
	servers, err := listenHTTP(nodes, announce)
	if err != nil {
		return err
	}
	errs := make(chan error, len(nodes))
	for _, s := range nodes {
		go func() { errs <- s.node.Run(ctx) }()
	}
	if ready != nil {
		// The banner says the mesh is ready: print it once every node serves (a replicated
		// region's metadata group has a leader), so that its commands work as printed.
		if !waitServing(ctx, nodes, devReadyTimeout) {
			fmt.Fprintf(e.stderr, "not every node serves yet after %v (a replicated region still elects its metadata leader): commands may answer \"unavailable ... retry\" for a moment\n", devReadyTimeout)
		}
		ready(nodes)
	}
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
	var first error
	for pending := len(nodes); pending > 0; {
		select {
		case <-usr1:
			for _, s := range nodes {
				if f := s.node.Federation(); f != nil {
					if err := f.Migrate(ctx, ""); err != nil {
						fmt.Fprintf(e.stderr, "node %s: migrate: %v\n", s.node.Name(), err)
					}
				}
			}
		case err := <-errs:
			pending--
			if err != nil && first == nil {
				first = err
				cancel() // one node failed: stop the others
			}
		}
	}
	for _, srv := range servers {
		sctx, scancel := context.WithTimeout(context.Background(), time.Second)
		srv.Shutdown(sctx)
		scancel()
	}
	if errors.Is(first, context.Canceled) {
		first = nil
	}
	return first
}

// listenHTTP serves each node's metrics and admin API on the addresses nodes name, writing
// the addresses bound back into nodes and announcing each. On an error it closes what it
// started and the nodes.
func listenHTTP(nodes []served, announce func(format string, args ...any)) ([]*http.Server, error) {
	var servers []*http.Server
	listen := func(flag, addr string, h http.Handler) (string, error) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for _, srv := range servers {
				srv.Close()
			}
			for _, s := range nodes {
				s.node.Close()
			}
			return "", fmt.Errorf("%s %s: %w", flag, addr, err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		servers = append(servers, srv)
		go srv.Serve(ln)
		return ln.Addr().String(), nil
	}
	for i, s := range nodes {
		var err error
		switch {
		case s.admin != "":
			if s.metrics != "" {
				mux := http.NewServeMux()
				mux.Handle("GET /metrics", s.node.MetricsHandler())
				var h http.Handler = mux
				if s.pprof {
					h = withProfiles(mux, s.timeline)
				}
				if s.metrics, err = listen("--metrics", s.metrics, h); err != nil {
					return nil, err
				}
				announce("node %s: metrics on http://%s/metrics\n", s.node.Name(), s.metrics)
			}
			if s.admin, err = listen("--admin", s.admin, s.node.AdminHandler()); err != nil {
				return nil, err
			}
			announce("node %s: admin API on http://%s/v1/\n", s.node.Name(), s.admin)
		case s.metrics != "":
			h := s.node.AdminHandler()
			if s.pprof {
				h = withProfiles(h, s.timeline)
			}
			if s.metrics, err = listen("--metrics", s.metrics, h); err != nil {
				return nil, err
			}
			announce("node %s: metrics on http://%s/metrics, admin API on http://%s/v1/\n", s.node.Name(), s.metrics, s.metrics)
		}
		nodes[i] = s
	}
	return servers, nil
}

// devReadyTimeout bounds how long the dev banner waits for every node to serve.
const devReadyTimeout = 30 * time.Second

// waitServing waits until every node serves (node.Node.Serving), ctx ends or d passes, and
// reports whether they all do.
func waitServing(ctx context.Context, nodes []served, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		all := true
		for _, s := range nodes {
			all = all && s.node.Serving()
		}
		if all {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// balanceSetting is node.RaftSettings.BalanceInterval from its two flags: negative when the
// balancer is off.
func balanceSetting(interval time.Duration, off bool) time.Duration {
	if off {
		return -1
	}
	return interval
}

// groupsSetting is node.RaftSettings.GroupsPerNode from its two flags: negative for a group
// per topic.
func groupsSetting(perNode int, perTopic bool) int {
	if perTopic {
		return -1
	}
	return perNode
}
