package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/quicmq/quicmq/internal/release"
)

// version overrides the release name `quicmq version` prints, set at build time with
// -ldflags "-X main.version=NAME" (the Makefile passes VERSION when given one). Without it
// the name comes from the releases this tree lists (internal/release, RELEASES): a release's
// name when the commit built is one, else the latest release's name with "+dev".
var version = ""

// commit is the commit built, for builds where the go command records none (GOFLAGS
// -buildvcs=false, a source tarball): -ldflags "-X main.commit=$(git rev-parse HEAD)", as the
// Makefile passes. What go build recorded (vcs.revision) wins.
var commit = ""

func init() {
	register("version", "print the release name, commit and Go version of this binary (also: quicmq --version)", runVersion)
}

func runVersion(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "version", "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, versionLine())
	return nil
}

// versionLine is "quicmq NAME (commit REV[, modified], TIME) GOVERSION OS/ARCH", from the
// -X variables, the releases list and what the go command recorded in the binary (vcs.*
// settings exist when it was built from a git checkout with `go build`; `go run` and test
// binaries have none). A modified tree is never a release: its name has "+dev".
func versionLine() string {
	rev, modified, when := "unknown", false, ""
	if commit != "" {
		rev = commit
	}
	goVersion := runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			case "vcs.time":
				when = s.Value
			}
		}
	}
	name := version
	if name == "" || name == "dev" {
		name = release.NameOf(rev)
		if modified && !strings.HasSuffix(name, "+dev") {
			name += "+dev"
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	desc := "commit " + rev
	if modified {
		desc += ", modified"
	}
	if when != "" {
		desc += ", " + when
	}
	return fmt.Sprintf("quicmq %s (%s) %s %s/%s", name, desc, goVersion, runtime.GOOS, runtime.GOARCH)
}
