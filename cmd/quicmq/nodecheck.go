package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"

	"github.com/quicmq/quicmq/internal/certs"
	"github.com/quicmq/quicmq/internal/config"
	"github.com/quicmq/quicmq/node"
)

// keyFlag names a node setting as both the config file and the command line spell it:
// "gossip_key (--gossip-key)"; a flag without a config key is named as the flag alone.
func keyFlag(flagName string) string {
	for _, k := range config.Keys {
		if k.Flag == flagName {
			return fmt.Sprintf("%s (--%s)", k.Name, flagName)
		}
	}
	return "--" + flagName
}

// problems collects what is wrong with a node's settings, each naming the setting. As an
// error it is a usage error saying all of them, one a line.
type problems []string

func (p *problems) add(flagName, format string, args ...any) {
	*p = append(*p, keyFlag(flagName)+": "+fmt.Sprintf(format, args...))
}

// err is nil without problems, else p.
func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	return p
}

func (p problems) Error() string {
	if len(p) == 1 {
		return p[0]
	}
	return fmt.Sprintf("%d problems:\n  %s", len(p), strings.Join(p, "\n  "))
}

func (p problems) Unwrap() error { return errUsage }

// nodeConfig is what 'quicmq node' runs after the flags, the environment and the file were
// applied: every check of the settings (config), then node.Config.Validate, which node.New
// would apply. 'quicmq config check' calls it too, so it refuses what node refuses.
func (f *nodeFlags) nodeConfig(e *env) (node.Config, error) {
	var probs problems
	if f.data == "" {
		probs.add("data", "required: the directory where this node keeps its log and certificates")
	}
	// The TLS files node.New would load first thing: told here with their keys, and by
	// 'config check' before a deploy rather than at the node's start.
	switch {
	case (f.certFile == "") != (f.keyFile == ""):
		probs.add("cert", "goes with %s: give both, or neither (the node then issues its own from the CA)", keyFlag("key"))
	case f.certFile != "" && !f.noFiles:
		if _, err := tls.LoadX509KeyPair(f.certFile, f.keyFile); err != nil {
			probs.add("cert", "%s with key %s: %v", f.certFile, f.keyFile, err)
		}
	}
	if f.caBundle != "" && !f.noFiles {
		if _, err := certs.LoadCAPool(f.caBundle); err != nil {
			probs.add("ca-bundle", "%s", strings.TrimPrefix(err.Error(), "certs: load CA pool: "))
		}
	}
	// The node would fail binding the second of them, after the log was opened.
	if f.admin != "" && f.admin == f.metrics {
		probs.add("admin", "%s is also the address of %s: give the admin API a port of its own, or leave it out to serve it with the metrics", f.admin, keyFlag("metrics"))
	}
	if f.pprof && f.metrics == "" {
		probs.add("pprof", "profiles are served on the metrics address: give %s too", keyFlag("metrics"))
	}
	cfg, err := f.config(e)
	var more problems
	if errors.As(err, &more) {
		probs = append(probs, more...)
	} else if err != nil {
		return node.Config{}, err
	}
	if err := probs.err(); err != nil {
		return node.Config{}, err
	}
	if err := cfg.Validate(); err != nil {
		return node.Config{}, err
	}
	return cfg, nil
}
