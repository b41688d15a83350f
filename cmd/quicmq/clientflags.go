package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/quicmq/quicmq/client"
)

// clientFlags are the connection flags shared by pub, sub and topics.
type clientFlags struct {
	server, ca, token, tokenFile, name string
	cert, key                          string
	timeout, idleTimeout               time.Duration
}

func (f *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.server, "server", "127.0.0.1:7400", "HOST:PORT of the node's QUIC listener (UDP); several nodes of one region,\n"+
		"comma-separated, are tried in order, and with --reconnect a lost connection moves to the next")
	fs.StringVar(&f.ca, "ca", "", "PEM file of the CA that signed the node's certificate (required);\n"+
		"a node that generated its own CA wrote it to DATA/tls/ca.pem, and 'quicmq dev' prints its path")
	fs.StringVar(&f.token, "token", "", "client token, when the node requires one (visible in the process list: prefer --token-file)")
	fs.StringVar(&f.tokenFile, "token-file", "", "file whose first line is the client token")
	fs.StringVar(&f.cert, "cert", "", "client certificate (PEM, from 'quicmq certs client'), instead of a token")
	fs.StringVar(&f.key, "key", "", "the key of --cert (PEM)")
	fs.StringVar(&f.name, "name", "quicmq-cli", "client name shown in the node's logs")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second, "how long to wait for the connection and for the node to answer a request")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", 0, "how long the node may stay silent before the connection counts as lost (QUIC's idle\n"+
		"timeout; 0: 30s); with --reconnect the client then dials again, moving to the next --server.\n"+
		"A node that stops or restarts says so at once; this bounds the wait for one that died or was cut off")
}

// check reports a missing or contradictory connection flag as a usage error.
func (f *clientFlags) check() error {
	if f.ca == "" {
		return usageError("--ca is required: the PEM file of the CA that signed the node's certificate " +
			"(a node that generated its own CA wrote it to DATA/tls/ca.pem, DATA being its --data directory; " +
			"'quicmq dev' prints the path when it starts)")
	}
	if f.server == "" {
		return usageError("--server is required: HOST:PORT of the node, e.g. 127.0.0.1:7400")
	}
	if f.token != "" && f.tokenFile != "" {
		return usageError("--token and --token-file both given: use one")
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
			return nil, fmt.Errorf("--token-file: %w", err)
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
		return nil, fmt.Errorf("%w\n(is --ca %s the CA of the node at %s?)", err, f.ca, f.server)
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
