package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/quicmq/quicmq/internal/config"
)

func init() {
	register("config", "check a node configuration file", runConfig)
}

// runConfig is `quicmq config check FILE`: every problem of the file at once, as
// file:line:col, then every problem 'quicmq node --config FILE' would refuse to start with (the
// QUICMQ_* environment applied as node applies it), and a non-zero exit when there is any.
func runConfig(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "config", "check [--no-files] FILE")
	// --no-files checks a configuration away from the host it is for (a rendered deploy):
	// the certificate and CA files it names are not read. It may stand anywhere after check.
	noFiles := false
	kept := args[:0:0]
	for _, a := range args {
		if a == "--no-files" || a == "-no-files" {
			noFiles = true
			continue
		}
		kept = append(kept, a)
	}
	args = kept
	fs.Usage = func() {
		fmt.Fprintf(e.stdout, "usage: quicmq config check [--no-files] FILE\n\n"+
			"Checks a node configuration file (HCL, or JSON when FILE ends in .json) as 'quicmq node --config FILE'\n"+
			"would: it prints every problem of the file as FILE:LINE:COL, then every setting node would refuse\n"+
			"(no client credentials, gossip without a key, ...), each named by its key and flag. Keys are the\n"+
			"'quicmq node' flags with '-' spelt '_'; the environment variables override the file (they are\n"+
			"applied here too) and take values as the flag does (lists comma-separated); flags override both.\n"+
			"--no-files skips reading the certificate and CA files the file names: for a configuration\n"+
			"checked away from the host it is for (e.g. rendered by Terraform).\n\n")
		for _, k := range config.Keys {
			fmt.Fprintf(e.stdout, "  %-16s %-26s %s\n", k.Name, k.Env(), k.Doc)
		}
	}
	if err := parseOnly(fs, args); err != nil {
		return err
	}
	for _, a := range fs.Args() {
		if a == "-h" || a == "-help" || a == "--help" {
			fs.Usage()
			return flag.ErrHelp
		}
	}
	if fs.NArg() != 2 || fs.Arg(0) != "check" {
		return usageError("want: quicmq config check FILE")
	}
	path := fs.Arg(1)
	f, err := config.Load(path)
	var cerr *config.Error
	if errors.As(err, &cerr) {
		fmt.Fprintln(e.stdout, cerr.Error())
		return fmt.Errorf("%s: %s", path, plural(len(cerr.Problems), "problem"))
	}
	if err != nil {
		return err
	}
	// The file parses: now what node does with it. The node flags are applied as runNode
	// applies them (environment over file), then node's own checks run.
	nfs := newFlagSet(e, "node", "")
	var nf nodeFlags
	nf.register(nfs, true)
	nf.noFiles = noFiles
	if err := applyConfig(nfs, path); err != nil {
		return err
	}
	if _, err := nf.nodeConfig(e); err != nil {
		var probs problems
		if !errors.As(err, &probs) {
			probs = problems{err.Error()}
		}
		for _, p := range probs {
			fmt.Fprintf(e.stdout, "%s: %s\n", path, p)
		}
		return fmt.Errorf("%s: %s ('quicmq node' would refuse to start)", path, plural(len(probs), "problem"))
	}
	fmt.Fprintf(e.stdout, "%s: ok (%s)\n", path, plural(len(f.Settings), "setting"))
	return nil
}

// applyConfig fills the flags of fs that the command line left unset: from the environment
// variable of their key (QUICMQ_WAN_JOIN for --wan-join) if set, else from the config file at
// path (if any). The precedence is thus flag > environment > file > the flag's default.
func applyConfig(fs *flag.FlagSet, path string) error {
	set := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var file *config.File
	if path != "" {
		var err error
		if file, err = config.Load(path); err != nil {
			var cerr *config.Error
			if errors.As(err, &cerr) {
				return fmt.Errorf("--config %s: %s (see 'quicmq config check'):\n%w", path, plural(len(cerr.Problems), "problem"), err)
			}
			return fmt.Errorf("--config: %w", err)
		}
	}
	for _, k := range config.Keys {
		if set[k.Flag] || fs.Lookup(k.Flag) == nil {
			continue
		}
		if v, ok := os.LookupEnv(k.Env()); ok {
			if err := fs.Set(k.Flag, v); err != nil {
				return usageError("%s=%q: %v", k.Env(), v, err)
			}
			continue
		}
		if file == nil {
			continue
		}
		if s, ok := file.Get(k.Name); ok {
			if err := fs.Set(k.Flag, s.Value); err != nil {
				return fmt.Errorf("%s: %s: %w", s.Pos, k.Name, err)
			}
		}
	}
	return nil
}
