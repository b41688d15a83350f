package main

import (
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/quicmq/quicmq/internal/certs"
)

func init() {
	register("certs", "create a CA and node/client certificates (ca, node, client, show, verify)", runCerts)
}

const certsSynopsis = `<ca|node|client|show|verify> [flags]

  certs ca     --dir DIR                                    create the mesh CA (DIR/ca.pem, DIR/ca-key.pem)
  certs node   --ca-dir DIR --name N --host H,IP... --out OUT  a node certificate (OUT/node.pem, node-key.pem, ca.pem)
  certs client --ca-dir DIR --name N --out OUT               a client certificate (OUT/client.pem, client-key.pem, ca.pem)
  certs show   --file FILE                                  subject, names, usages and expiry of each certificate in FILE
  certs verify --cert FILE --key FILE --ca FILE [--usage server|client]  check a pair against a CA (or a bundle)`

func runCerts(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		if len(args) == 0 {
			return usageError("a subcommand is required: ca, node, client, show or verify")
		}
		fmt.Fprintf(e.stdout, "usage: quicmq certs %s\n\nSee docs/security.md for rotation.\n", certsSynopsis)
		return nil
	}
	switch args[0] {
	case "ca":
		return runCertsCA(e, args[1:])
	case "node":
		return runCertsIssue(e, args[1:], certs.KindNode)
	case "client":
		return runCertsIssue(e, args[1:], certs.KindClient)
	case "show":
		return runCertsShow(e, args[1:])
	case "verify":
		return runCertsVerify(e, args[1:])
	}
	return usageError("unknown subcommand %q: want ca, node, client, show or verify", args[0])
}

func runCertsCA(e *env, args []string) error {
	fs := newFlagSet(e, "certs", "ca --dir DIR")
	dir := fs.String("dir", "", "directory of the CA: ca.pem (give it to clients and nodes) and ca-key.pem (keep it secret) (required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		return usageError("--dir is required: where the CA's certificate and key are kept")
	}
	ca, created, err := certs.EnsureCA(*dir)
	if err != nil {
		return err
	}
	verb := "created"
	if !created {
		verb = "kept the existing"
	}
	fmt.Fprintf(e.stdout, "%s CA %q, valid until %s\n  certificate: %s\n  key:         %s (mode 0600: keep it off the nodes if they get issued certificates)\n",
		verb, ca.Cert.Subject.CommonName, ca.Cert.NotAfter.UTC().Format(time.DateOnly),
		filepath.Join(*dir, certs.CACertFile), filepath.Join(*dir, certs.CAKeyFile))
	return nil
}

func runCertsIssue(e *env, args []string, kind certs.Kind) error {
	sub := "node"
	if kind == certs.KindClient {
		sub = "client"
	}
	fs := newFlagSet(e, "certs", sub+" --ca-dir DIR --name NAME --out DIR")
	caDir := fs.String("ca-dir", "", "directory of the CA made by 'quicmq certs ca' (required)")
	name := fs.String("name", "", "the certificate's common name: the node's --name, or the client's identity (required)")
	out := fs.String("out", "", "directory to write the certificate, its key and ca.pem into (required)")
	var hostList *string
	if kind == certs.KindNode {
		hostList = fs.String("host", "", "comma-separated DNS names and IP addresses other nodes and clients reach this node by (required; the name is added)")
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *caDir == "" || *name == "" || *out == "" {
		return usageError("--ca-dir, --name and --out are required")
	}
	var hosts []string
	if kind == certs.KindNode {
		hosts = splitList(*hostList)
		if len(hosts) == 0 {
			return usageError("--host is required: the names and addresses the node is reached by, e.g. --host node1.example,10.0.0.5")
		}
		// The node's name is a SAN too, as the node's own issuing does: peers verify the
		// name they learnt from gossip.
		if !strings.ContainsAny(*name, " \t/:") {
			hosts = append([]string{*name}, hosts...)
		}
	}
	ca, err := certs.LoadCA(*caDir)
	if err != nil {
		return fmt.Errorf("%w (create one with 'quicmq certs ca --dir %s')", err, *caDir)
	}
	paths, err := ca.IssueFiles(*out, kind, *name, hosts)
	if err != nil {
		return err
	}
	leaf, err := certs.Inspect(mustReadFile(paths[0]))
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "issued %s certificate %q by %q, valid until %s\n", sub, *name, ca.Cert.Subject.CommonName, leaf[0].NotAfter.UTC().Format(time.DateOnly))
	if kind == certs.KindNode {
		fmt.Fprintf(e.stdout, "  names: %s\n", strings.Join(append(leaf[0].DNSNames, leaf[0].IPs...), ", "))
	}
	for _, p := range paths {
		fmt.Fprintf(e.stdout, "  %s\n", p)
	}
	return nil
}

func mustReadFile(path string) []byte {
	b, _ := os.ReadFile(path)
	return b
}

func runCertsShow(e *env, args []string) error {
	fs := newFlagSet(e, "certs", "show --file FILE")
	file := fs.String("file", "", "PEM file: a certificate, a chain or a CA bundle (required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *file == "" {
		return usageError("--file is required")
	}
	data, err := os.ReadFile(*file)
	if err != nil {
		return err
	}
	infos, err := certs.Inspect(data)
	if err != nil {
		return fmt.Errorf("%s: %w", *file, err)
	}
	now := time.Now()
	for _, in := range infos {
		kind := "leaf"
		if in.IsCA {
			kind = "CA"
		}
		left := in.NotAfter.Sub(now).Round(time.Hour)
		status := "expires in " + plural(int(left.Hours()/24), "day")
		if left <= 0 {
			status = "EXPIRED"
		}
		fmt.Fprintf(e.stdout, "%s %s\n  issuer:  %s\n  serial:  %s\n  valid:   %s .. %s (%s)\n",
			kind, in.Subject, in.Issuer, in.Serial, in.NotBefore.UTC().Format(time.RFC3339), in.NotAfter.UTC().Format(time.RFC3339), status)
		if names := append(append([]string{}, in.DNSNames...), in.IPs...); len(names) > 0 {
			fmt.Fprintf(e.stdout, "  names:   %s\n", strings.Join(names, ", "))
		}
		if len(in.Usage) > 0 {
			fmt.Fprintf(e.stdout, "  usage:   %s\n", strings.Join(in.Usage, ", "))
		}
	}
	return nil
}

func runCertsVerify(e *env, args []string) error {
	fs := newFlagSet(e, "certs", "verify --cert FILE --key FILE --ca FILE [--usage server|client]")
	cert := fs.String("cert", "", "certificate file (required)")
	key := fs.String("key", "", "its private key (required)")
	ca := fs.String("ca", "", "CA certificate or bundle to verify against (required)")
	usage := fs.String("usage", "server", "what the certificate must be good for: server (a node) or client")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *cert == "" || *key == "" || *ca == "" {
		return usageError("--cert, --key and --ca are required")
	}
	u := x509.ExtKeyUsageServerAuth
	switch *usage {
	case "server":
	case "client":
		u = x509.ExtKeyUsageClientAuth
	default:
		return usageError("--usage %q: want server or client", *usage)
	}
	leaf, err := certs.VerifyFiles(*cert, *key, *ca, u)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "ok: %q, key matches, chains to %s for %s use, valid until %s\n",
		leaf.Subject.CommonName, *ca, *usage, leaf.NotAfter.UTC().Format(time.RFC3339))
	return nil
}
