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
// file:line:col, and a non-zero exit when there is any.
func runConfig(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "config", "check FILE")
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "usage: quicmq config check FILE\n\n"+
			"Checks a node configuration file (HCL, or JSON when FILE ends in .json) and prints every\n"+
			"problem as FILE:LINE:COL. Keys are the 'quicmq node' flags with '-' spelt '_'; the\n"+
			"environment variables override the file and take values as the flag does (lists\n"+
			"comma-separated); flags override both.\n\n")
		for _, k := range config.Keys {
			fmt.Fprintf(e.stderr, "  %-16s %-22s %s\n", k.Name, k.Env(), k.Doc)
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
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
	if err == nil {
		err = f.Require("data")
	}
	var cerr *config.Error
	if errors.As(err, &cerr) {
		fmt.Fprintln(e.stdout, cerr.Error())
		return fmt.Errorf("%s: %d problem(s)", path, len(cerr.Problems))
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s: ok (%d settings)\n", path, len(f.Settings))
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
				return fmt.Errorf("--config %s: %d problem(s) (see 'quicmq config check'):\n%w", path, len(cerr.Problems), err)
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
