package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/quicmq/quicmq/node/manage"
)

func init() {
	register("gossip-keys", "list or rotate the mesh's gossip keys (install, use, remove) through a node's admin API", runGossipKeys)
}

// runGossipKeys is a key rotation step: 'install' the new key everywhere, 'use' it, then
// 'remove' the old one; 'list' shows which keys (by fingerprint) the members hold.
func runGossipKeys(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "gossip-keys", "list|install|use|remove [--admin HOST:PORT] [--key BASE64 | --key-file FILE]")
	admin := fs.String("admin", "127.0.0.1:9400", adminFlagDoc)
	key := fs.String("key", "", "the key (base64 of 32 bytes) for install, use or remove")
	keyFile := fs.String("key-file", "", "file holding the key instead of --key")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for every member's answer")
	if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		return parseFlags(fs, args) // prints the help
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return usageError("name the operation first: quicmq gossip-keys list|install|use|remove [flags]")
	}
	op := args[0]
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if !slices.Contains([]string{"list", "install", "use", "remove"}, op) {
		return usageError("unknown operation %q: want list, install, use or remove", op)
	}
	if *keyFile != "" && *key == "" {
		b, err := os.ReadFile(*keyFile)
		if err != nil {
			return fmt.Errorf("--key-file: %w", err)
		}
		*key = strings.TrimSpace(string(b))
	}
	if op != "list" {
		k, err := base64.StdEncoding.DecodeString(*key)
		if err != nil || len(k) != 32 {
			return usageError("%s needs --key or --key-file: the base64 of a 32-byte key (e.g. from 'head -c32 /dev/urandom | base64')", op)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	method, path, body := http.MethodGet, "/v1/gossip/keys", ""
	if op != "list" {
		method, path, body = http.MethodPost, "/v1/gossip/keys/"+op, *key
	}
	base, err := adminBase(*admin)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, bytes.NewBufferString(body))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("admin API at %s: %w (is the node running with --admin or --metrics %s?)", *admin, err, *admin)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var pools []manage.KeyringStatus
	var failed struct {
		Error string                 `json:"error"`
		Pools []manage.KeyringStatus `json:"pools"`
	}
	switch resp.StatusCode {
	case http.StatusOK:
		if err := json.Unmarshal(raw, &pools); err != nil {
			return fmt.Errorf("admin API answer: %w", err)
		}
	case http.StatusBadGateway:
		if json.Unmarshal(raw, &failed) == nil {
			pools = failed.Pools
		}
	default:
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(raw)))
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tANSWERED\tKEYS (fingerprint: members holding it, * = primary)\tFAILURES")
	for _, p := range pools {
		var keys []string
		for fp, held := range p.Keys {
			mark := ""
			if p.Primary[fp] > 0 {
				mark = "*"
			}
			keys = append(keys, fmt.Sprintf("%s%s:%d", fp, mark, held))
		}
		slices.Sort(keys)
		var fails []string
		for name, msg := range p.Failures {
			fails = append(fails, name+": "+msg)
		}
		slices.Sort(fails)
		fmt.Fprintf(tw, "%s\t%d/%d\t%s\t%s\n", p.Pool, p.Responses, p.Members, strings.Join(keys, " "), strings.Join(fails, "; "))
	}
	tw.Flush()
	if failed.Error != "" {
		return fmt.Errorf("%s did not reach every member (repeat it; each step is idempotent): %s", op, failed.Error)
	}
	if op != "list" {
		fmt.Fprintf(e.stderr, "%s: key %s done on every member\n", op, manage.KeyFingerprint(mustB64(*key)))
	}
	return nil
}

func mustB64(s string) []byte {
	b, _ := base64.StdEncoding.DecodeString(s)
	return b
}
