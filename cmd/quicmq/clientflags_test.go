package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/node"
	"github.com/quicmq/quicmq/node/nodetest"
)

// cliNode is a node on 127.0.0.1 port 0 for the client commands' tests; t.Cleanup stops it.
type cliNode struct {
	addr, ca string
}

func startCLINode(t *testing.T, mod ...func(*node.Config)) *cliNode {
	t.Helper()
	n, _ := nodetest.Start(t, mod...)
	return &cliNode{addr: n.Addr().String(), ca: n.CAFile()}
}

// conn returns the connection flags for n.
func (n *cliNode) conn() []string { return []string{"--server", n.addr, "--ca", n.ca} }

// runCLI runs quicmq in-process with stdin as standard input and an empty environment,
// bounded to 30 s.
func runCLI(t testing.TB, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runCLIEnv(t, nil, stdin, args...)
}

// runCLIEnv is runCLI with the environment vars (the client commands' QUICMQ_* settings).
func runCLIEnv(t testing.TB, vars map[string]string, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	e := &env{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errOut, getenv: func(k string) string { return vars[k] }}
	code = runMain(ctx, e, args)
	return code, out.String(), errOut.String()
}

func TestClientCommandsBadFlags(t *testing.T) {
	conn := []string{"--server", "127.0.0.1:7400", "--ca", "ca.pem"}
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"pub", "--topic", "a"}, []string{"--ca is required", "DATA/tls/ca.pem", "quicmq dev"}},
		{append([]string{"pub"}, conn...), []string{"--topic is required"}},
		{append([]string{"pub", "--topic", "a", "--size", "10"}, conn...), []string{"add --count"}},
		{append([]string{"pub", "--topic", "a", "--count", "-1"}, conn...), []string{"--count must not be negative"}},
		{append([]string{"pub", "--topic", "a", "--window", "0"}, conn...), []string{"--window must be positive"}},
		{append([]string{"pub", "--topic", "a", "--token", "x", "--token-file", "f"}, conn...), []string{"--token and --token-file"}},
		{[]string{"pub", "--bogus"}, []string{"flag provided but not defined: -bogus"}},
		{append([]string{"pub", "--topic", "a..b"}, conn...), []string{`--topic: invalid topic "a..b": empty token`}},
		{append([]string{"pub", "--topic", "a.*"}, conn...), []string{`--topic: invalid topic "a.*"`, "wildcard"}},
		{append([]string{"sub"}, conn...), []string{"--topic is required"}},
		{append([]string{"sub", "--topic", "a.>.b"}, conn...), []string{`--topic: invalid pattern "a.>.b"`, "last token"}},
		{append([]string{"topics", "--pattern", "a..>"}, conn...), []string{`--pattern: invalid pattern "a..>"`}},
		{append([]string{"sub", "--topic", "a", "--from", "yesterday"}, conn...), []string{`--from "yesterday"`, "a time ago (5m", "2025-01-02T15:04:05Z"}},
		{append([]string{"sub", "--topic", "a", "--idle", "-1s"}, conn...), []string{"--idle must not be negative"}},
		{[]string{"sub", "--topic", "a"}, []string{"--ca is required"}},
		{append([]string{"topics", "extra"}, conn...), []string{`unexpected argument "extra"`}},
		{append([]string{"topics", "--pattern", ""}, conn...), []string{"--pattern must not be empty"}},
		{append([]string{"topics", "--timeout", "0s"}, conn...), []string{"--timeout must be positive"}},
		{append([]string{"sub", "--topic", "a", "--idle-timeout", "-1s"}, conn...), []string{"--idle-timeout must not be negative"}},
	}
	for _, c := range cases {
		code, _, stderr := runCLI(t, "", c.args...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2; stderr:\n%s", c.args, code, stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%v: stderr does not say %q:\n%s", c.args, w, stderr)
			}
		}
	}
}

func TestClientCommandsHelp(t *testing.T) {
	for cmd, flags := range map[string][]string{
		"pub":    {"-server", "-ca", "-token", "-token-file", "-timeout", "-topic", "-count", "-size", "-rate", "-print", "-window"},
		"sub":    {"-server", "-ca", "-token", "-topic", "-from", "-durable", "-count", "-idle"},
		"topics": {"-server", "-ca", "-token", "-pattern"},
	} {
		code, stdout, _ := runCLI(t, "", cmd, "--help")
		if code != 0 {
			t.Errorf("%s --help: exit %d", cmd, code)
		}
		for _, f := range flags {
			if !strings.Contains(stdout, "  "+f+" ") && !strings.Contains(stdout, "  "+f+"\n") {
				t.Errorf("%s --help does not explain %s:\n%s", cmd, f, stdout)
			}
		}
		for _, v := range clientEnv {
			if !strings.Contains(stdout, v) {
				t.Errorf("%s --help does not name %s:\n%s", cmd, v, stdout)
			}
		}
	}
}

func TestClientDialErrors(t *testing.T) {
	n := startCLINode(t, func(c *node.Config) { c.Tokens = []string{"0123456789abcdef-cli"} })
	code, _, stderr := runCLI(t, "x\n", append([]string{"pub", "--topic", "a"}, n.conn()...)...)
	if code != 1 || !strings.Contains(stderr, "unauthorized") || !strings.Contains(stderr, "--token") {
		t.Fatalf("missing token: exit %d:\n%s", code, stderr)
	}
	code, stdout, stderr := runCLI(t, "x\n", append([]string{"pub", "--topic", "a", "--token", "0123456789abcdef-cli"}, n.conn()...)...)
	if code != 0 || stdout != "0\tx\n" {
		t.Fatalf("with token: exit %d, stdout %q:\n%s", code, stdout, stderr)
	}
	code, _, stderr = runCLI(t, "", "topics", "--server", n.addr, "--ca", "/nonexistent/ca.pem")
	if code != 1 || !strings.Contains(stderr, "/nonexistent/ca.pem") {
		t.Fatalf("missing CA file: exit %d:\n%s", code, stderr)
	}
	code, _, stderr = runCLI(t, "", "topics", "--server", "127.0.0.1:1", "--ca", n.ca, "--timeout", "300ms")
	if code != 1 || !strings.Contains(stderr, "client: dial 127.0.0.1:1: connection refused (nothing listens on that UDP port)") {
		t.Fatalf("nothing listening: exit %d:\n%s", code, stderr)
	}
}
