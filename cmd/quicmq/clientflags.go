package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/quicmq/quicmq/client"
)

// The client commands' environment variables. They are apart from the QUICMQ_<KEY> variables
// of `quicmq node` (internal/config.Keys; a test keeps the two sets disjoint), so one shell can
// hold both.
const (
	envServer    = "QUICMQ_SERVER"
	envCA        = "QUICMQ_CA"
	envToken     = "QUICMQ_TOKEN"
	envTokenFile = "QUICMQ_TOKEN_FILE"
)

// clientEnv lists the variables the client commands read, for tests and help.
var clientEnv = []string{envServer, envCA, envToken, envTokenFile}

// defaultServer is --server's default when neither the flag nor QUICMQ_SERVER is given.
const defaultServer = "127.0.0.1:7400"

// clientFlags are the connection flags shared by pub, sub and topics. The connection flags
// left unset on the command line are filled from the environment (check does it): flags win
// over the environment, which wins over the defaults.
type clientFlags struct {
	server, ca, token, tokenFile, name string
	cert, key                          string
	timeout, idleTimeout               time.Duration

	e  *env
	fs *flag.FlagSet
	// from says where a setting came from ("--ca" or "QUICMQ_CA"), for error messages.
	from map[string]string
}

func (f *clientFlags) register(e *env, fs *flag.FlagSet) {
	f.e, f.fs = e, fs
	usage := fs.Usage
	fs.Usage = func() {
		usage()
		fmt.Fprint(e.stdout, "\n"+clientEnvHelp)
	}
	fs.StringVar(&f.server, "server", "", "HOST:PORT of the node's QUIC listener (UDP); several nodes of one region,\n"+
		"comma-separated, are tried in order, and with --reconnect a lost connection moves to the next\n"+
		"(default $"+envServer+", else "+defaultServer+")")
	fs.StringVar(&f.ca, "ca", "", "PEM file of the CA that signed the node's certificate (required: the flag or $"+envCA+");\n"+
		"a node that generated its own CA wrote it to DATA/tls/ca.pem, and 'quicmq dev' prints its path")
	fs.StringVar(&f.token, "token", "", "client token, when the node requires one (visible in the process list: prefer --token-file)\n"+
		"(default $"+envToken+")")
	fs.StringVar(&f.tokenFile, "token-file", "", "file whose first line is the client token (default $"+envTokenFile+")")
	fs.StringVar(&f.cert, "cert", "", "client certificate (PEM, from 'quicmq certs client'), instead of a token")
	fs.StringVar(&f.key, "key", "", "the key of --cert (PEM)")
	fs.StringVar(&f.name, "name", "quicmq-cli", "client name shown in the node's logs")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second, "how long to wait for the connection (dialing every --server included) and\n"+
		"for the node to answer a request")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", 0, "how long the node may stay silent before the connection counts as lost (0: 2s;\n"+
		"keep-alives go every half of it); with --reconnect the client then dials again, moving to the\n"+
		"next --server or --failover. A node that stops or restarts says so at once; this bounds the\n"+
		"wait for one that died or was cut off. Raise it on a lossy long-distance path")
}

// clientEnvHelp is the paragraph of the client commands' help about the environment.
const clientEnvHelp = `environment (a flag given wins over its variable):
  QUICMQ_SERVER      --server
  QUICMQ_CA          --ca
  QUICMQ_TOKEN       --token
  QUICMQ_TOKEN_FILE  --token-file
('quicmq dev' prints a line that sets them; the QUICMQ_<KEY> variables of 'quicmq node',
listed by 'quicmq config check -h', are another set and are not read here.)
`

// fromEnv fills the connection settings the command line left unset from the environment.
func (f *clientFlags) fromEnv() {
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	f.from = map[string]string{"server": "--server", "ca": "--ca", "token": "--token", "token-file": "--token-file"}
	take := func(name, variable string, dst *string) {
		if set[name] {
			return
		}
		if v := f.e.lookupEnv(variable); v != "" {
			*dst, f.from[name] = v, variable
		}
	}
	take("server", envServer, &f.server)
	take("ca", envCA, &f.ca)
	if !set["token"] && !set["token-file"] {
		// A token from the command line replaces both token variables, not only its own.
		take("token", envToken, &f.token)
		take("token-file", envTokenFile, &f.tokenFile)
	}
	if !set["server"] && f.server == "" {
		f.server = defaultServer
	}
}

// check fills in the environment, then reports a missing or contradictory connection setting
// as a usage error.
func (f *clientFlags) check() error {
	f.fromEnv()
	if f.ca == "" {
		return usageError("--ca is required (or $" + envCA + "): the PEM file of the CA that signed the node's certificate " +
			"(a node that generated its own CA wrote it to DATA/tls/ca.pem, DATA being its --data directory; " +
			"'quicmq dev' prints the path when it starts)")
	}
	if f.server == "" {
		return usageError("--server is required: HOST:PORT of the node, e.g. 127.0.0.1:7400")
	}
	if f.token != "" && f.tokenFile != "" {
		return usageError("%s and %s both given: use one", f.from["token"], f.from["token-file"])
	}
	if (f.cert == "") != (f.key == "") {
		return usageError("--cert and --key go together")
	}
	if f.timeout <= 0 {
		return usageError("--timeout must be positive, got %v", f.timeout)
	}
	if f.idleTimeout < 0 {
		return usageError("--idle-timeout must not be negative, got %v", f.idleTimeout)
	}
	return nil
}

// dial connects to the node and turns the usual failures into advice. opts may carry
// settings of the command (the publish window); the flags fill in the rest.
func (f *clientFlags) dial(ctx context.Context, opts client.Options) (*client.Conn, error) {
	token := f.token
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.from["token-file"], err)
		}
		token, _, _ = strings.Cut(string(b), "\n")
		token = strings.TrimSpace(token)
	}
	opts.CAFile, opts.Token, opts.Name, opts.IdleTimeout = f.ca, token, f.name, f.idleTimeout
	if f.cert != "" {
		pair, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return nil, fmt.Errorf("--cert %s / --key %s: %w", f.cert, f.key, err)
		}
		opts.TLSConfig = &tls.Config{Certificates: []tls.Certificate{pair}}
	}
	dctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	c, err := client.Dial(dctx, opts, splitServers(f.server)...)
	if err == nil {
		return c, nil
	}
	var ce *client.Error
	switch {
	case errors.As(err, &ce) && ce.Code == client.CodeUnauthorized:
		return nil, fmt.Errorf("%w\n(the node requires a valid credential: a token with --token-file or --token, or a client certificate with --cert and --key)", err)
	case strings.Contains(err.Error(), "certificate"):
		return nil, fmt.Errorf("%w\n(is %s %s the CA of the node at %s?)", err, f.from["ca"], f.ca, f.server)
	case strings.Contains(err.Error(), "refused"):
		return nil, fmt.Errorf("%w\n(is the node running, and is %s its QUIC port? 'quicmq dev' starts one)", err, f.server)
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "timeout"):
		return nil, fmt.Errorf("%w\n(no answer from %s within %v: is a node listening there? 'quicmq dev' starts one)", err, f.server, f.timeout)
	}
	return nil, err
}

// requestCtx bounds one request to the node by --timeout.
func (f *clientFlags) requestCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, f.timeout)
}

// splitServers turns --server's comma-separated list into one address per node.
func splitServers(list string) []string {
	var addrs []string
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	return addrs
}

// migrateOnSignal moves conn to a new local UDP socket on each SIGUSR1 until ctx ends (QUIC
// connection migration: the streams go on, no new handshake; Conn.Migrate falls back to a
// reconnect when the new path does not answer).
func migrateOnSignal(ctx context.Context, conn *client.Conn, stderr io.Writer) {
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		defer signal.Stop(usr1)
		for {
			select {
			case <-ctx.Done():
				return
			case <-usr1:
				if err := conn.Migrate(ctx); err != nil {
					fmt.Fprintf(stderr, "quicmq: migrate: %v\n", err)
				} else {
					fmt.Fprintf(stderr, "quicmq: migrated to %s\n", conn.Stats().LocalAddr)
				}
			}
		}
	}()
}
