package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/config"
	"github.com/quicmq/quicmq/internal/testlog"
)

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// flagOnly are node flags deliberately without a config key: the file's own path, and
// measurement aids that must never end up in a deployed configuration.
var flagOnly = map[string]bool{"config": true, "ablation-shared-stream": true, "ablation-shared-link": true}

// Every `quicmq node` flag has a config key and every key a flag, so a flag added to node.go
// without a key (or the reverse) fails here rather than silently missing from the file.
func TestConfigKeysMatchNodeFlags(t *testing.T) {
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	var f nodeFlags
	f.register(fs, true)
	keys := make(map[string]bool)
	for _, k := range config.Keys {
		keys[k.Flag] = true
		if fs.Lookup(k.Flag) == nil {
			t.Errorf("config key %s: no flag --%s", k.Name, k.Flag)
		}
	}
	fs.VisitAll(func(fl *flag.Flag) {
		if !keys[fl.Name] && !flagOnly[fl.Name] {
			t.Errorf("flag --%s has no config key", fl.Name)
		}
	})
}

// parseNode parses node flags as runNode does (command line, then environment and file).
func parseNode(t *testing.T, args ...string) (*nodeFlags, error) {
	t.Helper()
	fs := newFlagSet(&env{stderr: io.Discard}, "node", "")
	var f nodeFlags
	f.register(fs, true)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	return &f, applyConfig(fs, f.configFile)
}

// Precedence: flag > environment > file > default, key by key.
func TestConfigPrecedence(t *testing.T) {
	file := writeTemp(t, "node.hcl", `
data        = "/from/file"
anonymous   = true
insecure_gossip = true
region      = "file-region"
name        = "file-name"
listen      = "127.0.0.1:7001"
max_payload = 2048
join        = ["10.0.0.1:7946", "10.0.0.2:7946"]
gossip      = "10.0.0.9:7946"
`)
	t.Setenv("QUICMQ_REGION", "env-region")
	t.Setenv("QUICMQ_NAME", "env-name")
	t.Setenv("QUICMQ_LOG_LEVEL", "warn")
	f, err := parseNode(t, "--config", file, "--name", "flag-name")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ what, got, want string }{
		{"name (flag over env over file)", f.name, "flag-name"},
		{"region (env over file)", f.region, "env-region"},
		{"data (file)", f.data, "/from/file"},
		{"listen (file over default)", f.listen, "127.0.0.1:7001"},
		{"join (file list)", f.join, "10.0.0.1:7946,10.0.0.2:7946"},
		{"log level (env over default)", f.logLevel, "warn"},
		{"metrics (default)", f.metrics, ""},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %q, want %q", c.what, c.got, c.want)
		}
	}
	if f.maxPayload != 2048 {
		t.Errorf("max payload %d", f.maxPayload)
	}
	cfg, err := f.config(&env{stderr: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Join) != 2 || cfg.Region != "env-region" {
		t.Errorf("node config: %+v", cfg)
	}

	// Environment without a file; the config path itself from QUICMQ_CONFIG.
	t.Setenv("QUICMQ_CONFIG", file)
	t.Setenv("QUICMQ_MAX_PAYLOAD", "4096")
	if f, err = parseNode(t); err != nil || f.maxPayload != 4096 || f.data != "/from/file" {
		t.Errorf("QUICMQ_CONFIG: %+v, %v", f, err)
	}
	t.Setenv("QUICMQ_MAX_PAYLOAD", "lots")
	if _, err = parseNode(t); err == nil || !strings.Contains(err.Error(), `QUICMQ_MAX_PAYLOAD="lots"`) {
		t.Errorf("bad env value: %v", err)
	}
}

// Secrets from files: the gossip key and tokens, through the config file.
func TestConfigSecretFiles(t *testing.T) {
	key := writeTemp(t, "gossip.key", "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n")
	tokens := writeTemp(t, "tokens", "token-0123456789abcdef\n")
	file := writeTemp(t, "node.hcl", `data = "/d"
gossip = "127.0.0.1:0"
gossip_key_file = "`+key+`"
token_file = "`+tokens+`"
`)
	f, err := parseNode(t, "--config", file)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := f.config(&env{stderr: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if string(cfg.GossipKey) != "0123456789abcdef0123456789abcdef" || len(cfg.Credentials) != 1 || cfg.Credentials[0].Token != "token-0123456789abcdef" {
		t.Errorf("secrets: key %q credentials %+v", cfg.GossipKey, cfg.Credentials)
	}
}

func TestConfigCheckCommand(t *testing.T) {
	good := writeTemp(t, "good.hcl", "data = \"/var/lib/quicmq\"\nlisten = \"0.0.0.0:7400\"\nanonymous = true\n")
	code, out, errOut := runCLI(t, "", "config", "check", good)
	if code != 0 || !strings.Contains(out, "good.hcl: ok (3 settings)") {
		t.Errorf("good file: exit %d\n%s%s", code, out, errOut)
	}
	bad := writeTemp(t, "bad.hcl", "listen = \"nope\"\nmax_payload = -1\nlisetn = \"x\"\n")
	code, out, errOut = runCLI(t, "", "config", "check", bad)
	if code != 1 || !strings.Contains(errOut, "3 problems") {
		t.Errorf("bad file: exit %d, stderr %s", code, errOut)
	}
	for _, want := range []string{bad + ":1:10: listen", bad + ":2:15: max_payload", bad + ":3:1: unknown key \"lisetn\" (did you mean \"listen\"?)"} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in\n%s", want, out)
		}
	}
	if code, out, _ = runCLI(t, "", "config", "check", writeTemp(t, "nodata.hcl", "region = \"eu\"\n")); code != 1 || !strings.Contains(out, "data (--data): required") {
		t.Errorf("no data: exit %d %s", code, out)
	}
	same := writeTemp(t, "same.hcl", "data = \"/var/lib/quicmq\"\nanonymous = true\nmetrics = \"127.0.0.1:9400\"\nadmin = \"127.0.0.1:9400\"\n")
	if code, out, _ = runCLI(t, "", "config", "check", same); code != 1 || !strings.Contains(out, "admin (--admin): 127.0.0.1:9400 is also the address of metrics (--metrics)") {
		t.Errorf("admin on the metrics address: exit %d %s", code, out)
	}
	noMetrics := writeTemp(t, "pprof.hcl", "data = \"/var/lib/quicmq\"\nanonymous = true\npprof = true\n")
	if code, out, _ = runCLI(t, "", "config", "check", noMetrics); code != 1 || !strings.Contains(out, "pprof (--pprof): profiles are served on the metrics address: give metrics (--metrics) too") {
		t.Errorf("pprof without metrics: exit %d %s", code, out)
	}
	if code, out, _ = runCLI(t, "", "config", "check", "-h"); code != 0 || !strings.Contains(out, "QUICMQ_WAN_JOIN") {
		t.Errorf("help: exit %d %s", code, out)
	}
	if code, _, _ = runCLI(t, "", "config", "check"); code != 2 {
		t.Errorf("no file: exit %d", code)
	}
	if code, _, errOut = runCLI(t, "", "config", "check", "/nonexistent.hcl"); code != 1 || !strings.Contains(errOut, "no such file") {
		t.Errorf("missing file: exit %d %s", code, errOut)
	}
	// A node refuses a bad file and names every problem.
	code, _, errOut = runCLI(t, "", "node", "--config", bad)
	if code != 1 || !strings.Contains(errOut, "--config "+bad+": 3 problems") || !strings.Contains(errOut, bad+":2:15") {
		t.Errorf("node with bad file: exit %d %s", code, errOut)
	}
}

// A node started from a file alone serves clients with the file's settings.
func TestNodeFromConfigFile(t *testing.T) {
	data := t.TempDir()
	file := writeTemp(t, "node.hcl", `data = "`+data+`"
listen = "127.0.0.1:0"
metrics = "127.0.0.1:0"
region = "cfg-region"
name = "cfg-node"
log_level = "info"
anonymous = true
`)
	var stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	exit := make(chan int, 1)
	go func() {
		exit <- runMain(ctx, &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &stderr}, []string{"node", "--config", file})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-exit:
		case <-time.After(10 * time.Second):
			t.Error("node did not stop")
		}
	})
	addrRE := regexp.MustCompile(`node listening.*addr=(127\.0\.0\.1:\d+)`)
	testlog.WaitForErr(t, 15*time.Second, "the node to start", func() error {
		if addrRE.MatchString(stderr.String()) && strings.Contains(stderr.String(), "node cfg-node: metrics on") {
			return nil
		}
		return fmt.Errorf("its log:\n%s", stderr.String())
	})
	addr := addrRE.FindStringSubmatch(stderr.String())[1]
	c, err := client.Dial(context.Background(), client.Options{CAFile: filepath.Join(data, "tls", "ca.pem")}, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if name, region := c.Node(); name != "cfg-node" || region != "cfg-region" {
		t.Errorf("node %s region %s", name, region)
	}
}

// The retention_interval key (operations.md: retention runs every --retention-interval)
// reaches the node's configuration; a negative one is refused, named by key and flag.
func TestConfigRetentionInterval(t *testing.T) {
	file := writeTemp(t, "node.hcl", "data = \"/d\"\nanonymous = true\nretention_interval = \"250ms\"\n")
	f, err := parseNode(t, "--config", file)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := f.config(&env{stderr: io.Discard})
	if err != nil || cfg.RetentionInterval != 250*time.Millisecond {
		t.Fatalf("retention interval %v, %v; want 250ms", cfg.RetentionInterval, err)
	}
	if f, err = parseNode(t, "--config", file, "--retention-interval", "-1s"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.config(&env{stderr: io.Discard}); err == nil || !strings.Contains(err.Error(), "retention_interval (--retention-interval): must not be negative") {
		t.Fatalf("negative interval: %v", err)
	}
}

// The mirror_streams key (operations.md: the mirror streams a link keeps open) reaches the
// node's configuration; a negative --mirror-streams is refused.
func TestConfigMirrorStreams(t *testing.T) {
	file := writeTemp(t, "node.hcl", "data = \"/d\"\nanonymous = true\nmirror_streams = 64\n")
	f, err := parseNode(t, "--config", file)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := f.config(&env{stderr: io.Discard})
	if err != nil || cfg.MirrorStreams != 64 {
		t.Fatalf("mirror streams %d, %v; want 64", cfg.MirrorStreams, err)
	}
	if f, err = parseNode(t, "--config", file, "--mirror-streams", "-1"); err != nil {
		t.Fatal(err)
	}
	cfg, err = f.config(&env{stderr: io.Discard})
	if err == nil {
		err = cfg.Validate()
	}
	if err == nil || !strings.Contains(err.Error(), "MirrorStreams") {
		t.Fatalf("negative --mirror-streams: %v", err)
	}
}

// The keys of moves and replacement (operations.md, "Growing the region") reach the node's
// configuration; a negative --raft-moves, a negative --replace-after and one under a
// minute are refused, named by key and flag.
func TestConfigMovesAndReplaceAfter(t *testing.T) {
	file := writeTemp(t, "node.hcl", "data = \"/d\"\nanonymous = true\nraft_moves = 3\nraft_no_replica_balance = true\nreplace_after = \"10m\"\n")
	f, err := parseNode(t, "--config", file)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := f.config(&env{stderr: io.Discard})
	if err != nil || cfg.Raft.Moves != 3 || !cfg.Raft.DisableReplicaBalance || cfg.Raft.ReplaceAfter != 10*time.Minute {
		t.Fatalf("raft settings %+v, %v", cfg.Raft, err)
	}
	for _, c := range []struct{ args []string }{
		{[]string{"--raft-moves", "-1"}},
		{[]string{"--replace-after", "-1m"}},
		{[]string{"--replace-after", "30s"}},
	} {
		f, err := parseNode(t, append([]string{"--config", file}, c.args...)...)
		if err != nil {
			t.Fatal(err)
		}
		key := strings.ReplaceAll(strings.TrimPrefix(c.args[0], "--"), "-", "_")
		if _, err := f.config(&env{stderr: io.Discard}); err == nil || !strings.Contains(err.Error(), key+" ("+c.args[0]+")") {
			t.Fatalf("%v: %v", c.args, err)
		} else {
			t.Logf("%v: %v", c.args, err)
		}
	}
	if f, err = parseNode(t, "--config", file, "--replace-after", "bogus"); err == nil {
		t.Fatalf("--replace-after bogus parsed: %+v", f.replaceAfter)
	}
}
