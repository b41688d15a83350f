package main

import (
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/internal/config"
	"github.com/quicmq/quicmq/internal/release"
	"github.com/quicmq/quicmq/node"
)

// Every subcommand explains itself on standard output when asked (-h, --help, quicmq help
// CMD) and exits 0; a flag it does not know is one line of error and one line pointing at
// -h on standard error, exit 2, never the whole help.
func TestHelpEverySubcommand(t *testing.T) {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			for _, args := range [][]string{{name, "-h"}, {name, "--help"}, {"help", name}} {
				code, stdout, stderr := runCLI(t, "", args...)
				if code != 0 || stderr != "" || !strings.Contains(stdout, "usage: quicmq "+name) {
					t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
				}
			}
			code, stdout, stderr := runCLI(t, "", name, "--no-such-flag")
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			if code != 2 || stdout != "" || len(lines) != 2 || !strings.HasPrefix(lines[0], "quicmq "+name+": ") ||
				lines[1] != "run 'quicmq "+name+" -h' for help" {
				t.Errorf("%s --no-such-flag: exit %d, stdout %q, stderr:\n%s", name, code, stdout, stderr)
			}
		})
	}
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		if code, stdout, stderr := runCLI(t, "", args...); code != 0 || stderr != "" || !strings.Contains(stdout, "commands:") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	// Not asked for: the command list goes to stderr with exit 2.
	if code, stdout, stderr := runCLI(t, ""); code != 2 || stdout != "" || !strings.Contains(stderr, "commands:") {
		t.Errorf("no command: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, _, stderr := runCLI(t, "", "nope"); code != 2 || !strings.Contains(stderr, `unknown command "nope"`) || strings.Contains(stderr, "commands:") {
		t.Errorf("unknown command: exit %d, stderr %q", code, stderr)
	}
}

func TestVersion(t *testing.T) {
	// A test binary records no commit: it names itself after the latest release, "+dev".
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, stdout, stderr := runCLI(t, "", args...)
		if code != 0 || stderr != "" || !strings.HasPrefix(stdout, "quicmq "+release.Latest().Name+"+dev (commit ") || !strings.Contains(stdout, runtime.Version()) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	// A build of a release's commit is named after it (the commit as -X gives it here).
	defer func(c string) { commit = c }(commit)
	for _, r := range release.All() {
		commit = r.Commit
		if got, want := versionLine(), "quicmq "+r.Name+" (commit "+r.Commit[:12]+") "; !strings.HasPrefix(got, want) {
			t.Errorf("built at %s: %q, want %q...", r.Commit[:12], got, want)
		}
	}
	// The built binary carries the -X version and the commit go build recorded (built in a
	// git checkout with -buildvcs=auto).
	bin := quicmqBinary(t)
	out, err := runBinary(bin, "--version")
	if err != nil || !strings.HasPrefix(out, "quicmq "+testVersion+" (commit ") {
		t.Errorf("%s --version: %v %q", bin, err, out)
	}
	// Whatever go build recorded is what it prints (GOFLAGS=-buildvcs=false records none).
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	want := "commit " + testCommit[:12]
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			want = "commit " + s.Value[:12]
		}
	}
	if !strings.Contains(out, want) || !strings.Contains(out, bi.GoVersion) {
		t.Errorf("%s --version: %q, want %q and %s", bin, out, want, bi.GoVersion)
	}
}

func TestPlural(t *testing.T) {
	for n, want := range map[int]string{0: "0 records", 1: "1 record", 2: "2 records"} {
		if got := plural(n, "record"); got != want {
			t.Errorf("plural(%d) = %q, want %q", n, got, want)
		}
	}
}

// The client commands take their connection settings from QUICMQ_SERVER, QUICMQ_CA,
// QUICMQ_TOKEN and QUICMQ_TOKEN_FILE; a flag given wins over its variable.
func TestClientSettingsFromEnvironment(t *testing.T) {
	const token = "0123456789abcdef-env"
	n := startCLINode(t, func(c *node.Config) { c.Tokens = []string{token} })
	tokenFile := writeTemp(t, "token", token+"\n")
	vars := map[string]string{envServer: n.addr, envCA: n.ca, envTokenFile: tokenFile}
	if code, stdout, stderr := runCLIEnv(t, vars, "", "pub", "--topic", "env.t", "one"); code != 0 || stdout != "0\tone\n" {
		t.Fatalf("pub from the environment: exit %d %q %s", code, stdout, stderr)
	}
	if code, stdout, stderr := runCLIEnv(t, vars, "", "sub", "--topic", "env.t", "--count", "1"); code != 0 || stdout != "0\tenv.t\tone\n" {
		t.Fatalf("sub from the environment: exit %d %q %s", code, stdout, stderr)
	}
	if code, stdout, stderr := runCLIEnv(t, vars, "", "topics"); code != 0 || !strings.Contains(stdout, "env.t") {
		t.Fatalf("topics from the environment: exit %d %q %s", code, stdout, stderr)
	}
	// Flags win: a wrong server and CA in the environment do not matter when the flags say.
	wrong := map[string]string{envServer: "127.0.0.1:1", envCA: "/nonexistent/ca.pem", envToken: "wrong-token-0123456789"}
	if code, _, stderr := runCLIEnv(t, wrong, "", "topics", "--server", n.addr, "--ca", n.ca, "--token-file", tokenFile); code != 0 {
		t.Fatalf("flags over the environment: exit %d %s", code, stderr)
	}
	// ... and a variable alone is used: the wrong token is refused, naming the credential.
	if code, _, stderr := runCLIEnv(t, wrong, "", "topics", "--server", n.addr, "--ca", n.ca); code != 1 || !strings.Contains(stderr, "unauthorized") {
		t.Fatalf("the environment's token: exit %d %s", code, stderr)
	}
	both := map[string]string{envServer: n.addr, envCA: n.ca, envToken: token, envTokenFile: tokenFile}
	if code, _, stderr := runCLIEnv(t, both, "", "topics"); code != 2 || !strings.Contains(stderr, "QUICMQ_TOKEN and QUICMQ_TOKEN_FILE both given") {
		t.Fatalf("both token variables: exit %d %s", code, stderr)
	}
	if code, _, stderr := runCLIEnv(t, map[string]string{envServer: n.addr}, "", "topics"); code != 2 || !strings.Contains(stderr, "--ca is required (or $QUICMQ_CA)") {
		t.Fatalf("no CA: exit %d %s", code, stderr)
	}
}

// The node's QUICMQ_<KEY> variables and the client commands' variables are apart, so a shell
// that has pasted dev's export line still starts 'quicmq node' with its own settings.
func TestClientAndNodeVariablesApart(t *testing.T) {
	for _, k := range config.Keys {
		if slices.Contains(clientEnv, k.Env()) {
			t.Errorf("node key %s reads %s, which the client commands read too", k.Name, k.Env())
		}
	}
	if k, _ := config.KeyByName("token_file"); k.Env() != "QUICMQ_NODE_TOKEN_FILE" {
		t.Errorf("token_file reads %s", k.Env())
	}
}

// --timeout bounds the dial: a port nobody listens on fails within it, naming the address.
func TestDialTimeoutNamesAddress(t *testing.T) {
	n := startCLINode(t)
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := pc.LocalAddr().String()
	pc.Close()
	start := time.Now()
	code, _, stderr := runCLI(t, "", "topics", "--server", dead, "--ca", n.ca, "--timeout", "1s")
	took := time.Since(start)
	if code != 1 || !strings.Contains(stderr, dead) {
		t.Fatalf("nothing listening at %s: exit %d:\n%s", dead, code, stderr)
	}
	// The SDK reports a refused port at once; at worst the dial ends with --timeout.
	if took > 2500*time.Millisecond {
		t.Fatalf("dialing %s took %v with --timeout 1s", dead, took)
	}
	t.Logf("refused dial reported after %v: %s", took, stderr)
}

// pub publishes one record from an argument or a whole file (any bytes), echoes nothing with
// --quiet, and refuses combinations that conflict.
func TestPubPayloadFileQuiet(t *testing.T) {
	n := startCLINode(t)
	pub := func(stdin string, args ...string) (int, string, string) {
		return runCLI(t, stdin, append(append([]string{"pub"}, n.conn()...), args...)...)
	}
	if code, stdout, stderr := pub("ignored\n", "--topic", "p.t", "hello world"); code != 0 || stdout != "0\thello world\n" {
		t.Fatalf("payload argument: exit %d %q %s", code, stdout, stderr)
	}
	// Flags after the payload, and a payload starting with '-' after "--".
	if code, stdout, stderr := pub("", "second", "--topic", "p.t"); code != 0 || stdout != "1\tsecond\n" {
		t.Fatalf("flags after the payload: exit %d %q %s", code, stdout, stderr)
	}
	if code, stdout, stderr := pub("", "--topic", "p.t", "--", "-dash"); code != 0 || stdout != "2\t-dash\n" {
		t.Fatalf("payload after --: exit %d %q %s", code, stdout, stderr)
	}
	bin := make([]byte, 0, 600)
	for i := range 600 {
		bin = append(bin, byte(i*7)) // every byte value, newlines and NULs included
	}
	file := filepath.Join(t.TempDir(), "blob.bin")
	if err := os.WriteFile(file, bin, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := pub("", "--topic", "p.t", "--file", file); code != 0 || stdout != "3\t"+file+" (600 bytes)\n" {
		t.Fatalf("--file: exit %d %q %s", code, stdout, stderr)
	}
	if code, stdout, stderr := pub("a\nb\n", "--topic", "p.t", "--quiet"); code != 0 || stdout != "" {
		t.Fatalf("--quiet: exit %d %q %s", code, stdout, stderr)
	}
	code, stdout, stderr := runCLI(t, "", append([]string{"sub", "--topic", "p.t", "--count", "6", "--format", "json"}, n.conn()...)...)
	if code != 0 {
		t.Fatalf("sub: exit %d %s", code, stderr)
	}
	var recs []jsonRecord
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var r jsonRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		recs = append(recs, r)
	}
	if len(recs) != 6 || *recs[0].Payload != "hello world" || *recs[2].Payload != "-dash" || !bytes.Equal(recs[3].PayloadBase64, bin) ||
		*recs[4].Payload != "a" || *recs[5].Payload != "b" {
		t.Fatalf("stored records: %s", stdout)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--topic", "p.t", "a", "b"}, "2 payload arguments"},
		{[]string{"--topic", "p.t", "--file", file, "a"}, "a payload argument and --file both given"},
		{[]string{"--topic", "p.t", "--count", "3", "a"}, "--count generates records"},
		{[]string{"--topic", "p.t", "--count", "3", "--file", file}, "--count generates records"},
		{[]string{"--topic", "p.t", "--count", "3", "--print", "--quiet"}, "--quiet and --print exclude each other"},
	} {
		if code, _, stderr := pub("", c.args...); code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, want 2 saying %q:\n%s", c.args, code, c.want, stderr)
		}
	}
	if code, _, stderr := pub("", "--topic", "p.t", "--file", "/nonexistent/blob"); code != 1 || !strings.Contains(stderr, "--file: open /nonexistent/blob") {
		t.Errorf("missing --file: exit %d %s", code, stderr)
	}
	// Counts are singular when they are one.
	if code, _, stderr := pub("", "--topic", "p.t", "--count", "1", "--size", "1"); code != 0 || !strings.Contains(stderr, "1 record of 1 byte acked") {
		t.Errorf("--count 1: exit %d %s", code, stderr)
	}
}

func TestAdminBase(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:9400":         "http://127.0.0.1:9400",
		"http://127.0.0.1:9400":  "http://127.0.0.1:9400",
		"http://127.0.0.1:9400/": "http://127.0.0.1:9400",
		"HTTP://localhost:9400":  "http://localhost:9400",
		"[::1]:9400":             "http://[::1]:9400",
	} {
		if got, err := adminBase(in); err != nil || got != want {
			t.Errorf("adminBase(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"https://127.0.0.1:9400":  "plain HTTP, not HTTPS",
		"ftp://127.0.0.1:9400":    "want HOST:PORT or http://HOST:PORT",
		"127.0.0.1":               "want HOST:PORT or http://HOST:PORT",
		"http://127.0.0.1:9400/x": "want HOST:PORT or http://HOST:PORT",
	} {
		if _, err := adminBase(in); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), in) {
			t.Errorf("adminBase(%q): %v, want an error naming it and saying %q", in, err, want)
		}
	}
	if code, _, stderr := runCLI(t, "", "members", "--admin", "https://127.0.0.1:9400"); code != 2 || !strings.Contains(stderr, "HTTPS") {
		t.Errorf("members --admin https://: exit %d %s", code, stderr)
	}
}

// A configuration 'quicmq node' refuses is refused by 'quicmq config check' with the same
// problems, each naming the config key and the flag.
func TestConfigCheckAppliesNodeChecks(t *testing.T) {
	keyFile := writeTemp(t, "short.key", "c2hvcnQ=\n")
	file := writeTemp(t, "node.hcl", "data = \""+t.TempDir()+"\"\nlisten = \"127.0.0.1:0\"\ngossip = \"127.0.0.1:0\"\n")
	wantProblems := []string{
		"gossip_key (--gossip-key): gossip (--gossip) is set without a gossip key",
		"tokens (--tokens): no client credentials: give tokens (--tokens) or token_file (--token-file), or anonymous (--anonymous)",
	}
	code, stdout, stderr := runCLI(t, "", "config", "check", file)
	if code != 1 || !strings.Contains(stderr, "2 problems ('quicmq node' would refuse to start)") {
		t.Fatalf("config check: exit %d\n%s%s", code, stdout, stderr)
	}
	code, _, nodeErr := runCLI(t, "", "node", "--config", file)
	if code != 2 {
		t.Fatalf("node: exit %d, want 2 (refused before starting):\n%s", code, nodeErr)
	}
	for _, w := range wantProblems {
		if !strings.Contains(stdout, file+": "+w) {
			t.Errorf("config check does not say %q:\n%s", w, stdout)
		}
		if !strings.Contains(nodeErr, w) {
			t.Errorf("node does not say %q:\n%s", w, nodeErr)
		}
	}
	// A bad key file is one problem more for both, named by its key.
	file2 := writeTemp(t, "node2.hcl", "data = \""+t.TempDir()+"\"\nanonymous = true\ngossip = \"127.0.0.1:0\"\n")
	t.Setenv("QUICMQ_GOSSIP_KEY_FILE", keyFile) // the environment applies as it does for node
	code, stdout, _ = runCLI(t, "", "config", "check", file2)
	_, _, nodeErr = runCLI(t, "", "node", "--config", file2)
	if code != 1 || !strings.Contains(stdout, "gossip_key_file (--gossip-key-file): want the base64 of 32 bytes") ||
		!strings.Contains(nodeErr, "gossip_key_file (--gossip-key-file): want the base64 of 32 bytes") {
		t.Errorf("short key: exit %d\n%s\nnode: %s", code, stdout, nodeErr)
	}
	// TLS files the node would load at its start: missing ones are named by their keys.
	file3 := writeTemp(t, "node3.hcl", "data = \""+t.TempDir()+"\"\nanonymous = true\ncert = \"/nonexistent/node.pem\"\n"+
		"ca_bundle = \"/nonexistent/ca.pem\"\n")
	code, stdout, _ = runCLI(t, "", "config", "check", file3)
	_, _, nodeErr = runCLI(t, "", "node", "--config", file3)
	for _, w := range []string{"cert (--cert): goes with key (--key)", "ca_bundle (--ca-bundle): open /nonexistent/ca.pem"} {
		if code != 1 || !strings.Contains(stdout, w) || !strings.Contains(nodeErr, w) {
			t.Errorf("TLS files: want %q: exit %d\n%s\nnode: %s", w, code, stdout, nodeErr)
		}
	}
	t.Setenv("QUICMQ_GOSSIP_KEY_FILE", writeTemp(t, "good.key", "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n"))
	if code, stdout, stderr := runCLI(t, "", "config", "check", file2); code != 0 || !strings.Contains(stdout, "ok (3 settings)") {
		t.Errorf("good key from the environment: exit %d %s %s", code, stdout, stderr)
	}
	// --no-files checks a configuration meant for another host: the files are not read, the
	// rest is still checked.
	file4 := writeTemp(t, "node4.hcl", "data = \""+t.TempDir()+"\"\nanonymous = true\ncert = \"/nonexistent/node.pem\"\n"+
		"key = \"/nonexistent/node-key.pem\"\nca_bundle = \"/nonexistent/ca.pem\"\n")
	if code, stdout, stderr := runCLI(t, "", "config", "check", file4); code != 1 || !strings.Contains(stdout, "cert (--cert): /nonexistent/node.pem") {
		t.Errorf("missing cert files: exit %d %s %s", code, stdout, stderr)
	}
	if code, stdout, stderr := runCLI(t, "", "config", "check", "--no-files", file4); code != 0 || !strings.Contains(stdout, "ok (5 settings)") {
		t.Errorf("--no-files: exit %d %s %s", code, stdout, stderr)
	}
}

// The replicas key: out of range, or without the gossip pool its replicas need, named by its
// key and flag in config check and refused by node alike.
func TestConfigCheckReplicas(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{"replicas = 9\n", "replicas (--replicas): 9: want 1 to 7 (odd recommended"},
		{"replicas = 3\n", "replicas (--replicas): 3 needs gossip (--gossip)"},
	} {
		file := writeTemp(t, "node.hcl", "data = \""+t.TempDir()+"\"\nanonymous = true\n"+c.body)
		code, stdout, _ := runCLI(t, "", "config", "check", file)
		_, _, nodeErr := runCLI(t, "", "node", "--config", file)
		if code != 1 || !strings.Contains(stdout, c.want) || !strings.Contains(nodeErr, c.want) {
			t.Errorf("%q: want %q: exit %d\n%s\nnode: %s", c.body, c.want, code, stdout, nodeErr)
		}
	}
	file := writeTemp(t, "node.hcl", "data = \""+t.TempDir()+"\"\nanonymous = true\ngossip = \"127.0.0.1:0\"\ninsecure_gossip = true\nreplicas = 3\n")
	if code, stdout, stderr := runCLI(t, "", "config", "check", file); code != 0 {
		t.Errorf("replicas 3 with gossip: exit %d %s %s", code, stdout, stderr)
	}
}
