package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/quicmq/quicmq/internal/config"
)

// devBanner is what 'quicmq dev' says when its mesh is up. Every command it prints runs as
// printed (TestDevBannerCommandsRun runs them): the binary as the user started it, the bound
// ports, the CA dev wrote and, with --token-file, a client token.
type devBanner struct {
	nodes       []served
	regions     []string
	perRegion   int
	data        string
	dataNote    string
	tokenFile   string // client token file for the commands ("": anonymous)
	tokenSource string // the --token-file it was taken from
	bin         string // how to invoke this binary from a shell
	replicas    int    // replicas of each topic (1: one node holds it)
}

func printBanner(w io.Writer, b devBanner) {
	ca := b.nodes[0].node.CAFile()
	each := "one node each"
	switch {
	case b.replicas > 1:
		each = fmt.Sprintf("%d nodes each, replicated: each topic on %d of them, kept in agreement by raft (--replicas %d)", b.perRegion, b.replicas, b.replicas)
	case b.perRegion > 1:
		each = fmt.Sprintf("%d nodes each (a topic lives on one of them; the others relay)", b.perRegion)
	}
	fmt.Fprintf(w, "QuicMQ dev mesh is up: %s, %s, joined over WAN gossip.\n", plural(len(b.regions), "region"), each)
	for _, s := range b.nodes {
		admin := ""
		if s.metrics != "" {
			admin = "  metrics/admin http://" + s.metrics
		}
		fmt.Fprintf(w, "  region %-6s node %-10s %s%s\n", s.node.Region(), s.node.Name(), s.node.Addr(), admin)
	}
	fmt.Fprintf(w, "  data %s %s\n  CA   %s\n", b.data, b.dataNote, ca)
	switch {
	case b.tokenFile != "":
		fmt.Fprintf(w, "  client token file %s (a full-access token of --token-file %s)\n", b.tokenFile, b.tokenSource)
	case b.tokenSource != "":
		fmt.Fprintf(w, "  --token-file %s has no token with full access: add --token TOKEN (or %s=FILE) to the commands below\n",
			b.tokenSource, envTokenFile)
	}

	// A region's nodes, comma-separated: a client given them all moves to the next one when
	// its node is lost (--reconnect).
	region := func(r string) string {
		var addrs []string
		for _, s := range b.nodes {
			if s.node.Region() == r {
				addrs = append(addrs, s.node.Addr().String())
			}
		}
		return strings.Join(addrs, ",")
	}
	fmt.Fprintln(w, "\nClient settings for one region (paste a line into a shell; then e.g. '"+b.bin+" topics'):")
	for _, r := range b.regions {
		line := "export " + envServer + "=" + shellQuote(region(r)) + " " + envCA + "=" + shellQuote(ca)
		if b.tokenFile != "" {
			line += " " + envTokenFile + "=" + shellQuote(b.tokenFile)
		}
		fmt.Fprintf(w, "  %s   # %s\n", line, r)
	}

	conn := func(r string) string {
		s := "--server " + region(r) + " --ca " + shellQuote(ca)
		if b.tokenFile != "" {
			s += " --token-file " + shellQuote(b.tokenFile)
		}
		return s
	}
	reconnect := "" // sub and pub move to the region's next node when theirs stops
	if b.perRegion > 1 {
		reconnect = " --reconnect"
	}
	first, last := b.regions[0], b.regions[len(b.regions)-1]
	fmt.Fprintf(w, "\nTry, in other terminals (records published in one region reach subscribers in every region):\n")
	fmt.Fprintf(w, "  %s sub %s --topic 'demo.>'%s\n", b.bin, conn(last), reconnect)
	fmt.Fprintf(w, "  echo hello | %s pub %s --topic demo.hello%s\n", b.bin, conn(first), reconnect)
	fmt.Fprintf(w, "  %s topics %s\n", b.bin, conn(last))
	if m := b.nodes[0].metrics; m != "" {
		fmt.Fprintf(w, "  %s members --admin http://%s\n  %s links --admin http://%s\n", b.bin, m, b.bin, m)
	}
	fmt.Fprintln(w, "\nPress Ctrl-C to stop.")
}

// invocation is how a shell runs this binary again: its path when it was started by one
// ("quicmq" found on PATH stays "quicmq", "./bin/quicmq" becomes absolute so it works from
// any directory), and `go run` when it is a binary of `go run`, which is deleted on exit.
func invocation() string {
	wd, _ := os.Getwd()
	return invocationOf(os.Args[0], exec.LookPath, wd)
}

func invocationOf(argv0 string, lookPath func(string) (string, error), wd string) string {
	goRun := "go run github.com/quicmq/quicmq/cmd/quicmq" // works in any directory of the module
	if fi, err := os.Stat(filepath.Join(wd, "cmd", "quicmq")); err == nil && fi.IsDir() {
		goRun = "go run ./cmd/quicmq"
	}
	if isGoRunBinary(argv0) {
		return goRun
	}
	if !strings.ContainsRune(argv0, filepath.Separator) {
		if _, err := lookPath(argv0); err == nil {
			return shellQuote(argv0)
		}
		return goRun
	}
	if abs, err := filepath.Abs(argv0); err == nil {
		argv0 = abs
	}
	return shellQuote(argv0)
}

// isGoRunBinary reports whether path is where `go run` puts the binary it builds
// ($GOTMPDIR/go-build.../b001/exe/NAME).
func isGoRunBinary(path string) bool {
	dir := filepath.ToSlash(filepath.Dir(path))
	return strings.HasSuffix(dir, "/exe") && strings.Contains(dir, "/go-build")
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	safe := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_./:,=@+-%", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// writeClientToken picks a token with full access from the nodes' credential file and writes
// it to DATA/client-token (mode 0600), for the commands the banner suggests; "" when the file
// has none (only certificates, or tokens with grants).
func writeClientToken(credFile, data string) (string, error) {
	b, err := os.ReadFile(credFile)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	creds, probs := config.ParseCredentials(string(b))
	if len(probs) > 0 {
		return "", usageError("--token-file %s: %s", credFile, strings.Join(probs, "; "))
	}
	token := ""
	for _, c := range creds {
		if c.Token != "" && c.Publish == nil && c.Subscribe == nil {
			token = c.Token
			break
		}
	}
	if token == "" {
		return "", nil // the banner says so
	}
	path := filepath.Join(data, "client-token")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return "", fmt.Errorf("dev: %w", err)
	}
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("dev: write client token: %w", err)
	}
	return path, nil
}
