package main

import (
	"os"
	"path/filepath"
)

// defaultOut is --out's default: the repository's bench/results, found from wherever inside
// the tree qmqbench runs (docs/benchmarks.md runs it from the root and from bench/), so results
// never land in a stray bench/bench/results; outside the tree, bench/results under the
// working directory.
var defaultOut = resultsDir()

func resultsDir() string {
	dir, err := os.Getwd()
	if err != nil {
		return filepath.Join("bench", "results")
	}
	for d := dir; ; d = filepath.Dir(d) {
		if isBenchModule(filepath.Join(d, "bench")) {
			return relTo(dir, filepath.Join(d, "bench", "results"))
		}
		if isBenchModule(d) {
			return relTo(dir, filepath.Join(d, "results"))
		}
		if filepath.Dir(d) == d {
			return filepath.Join("bench", "results")
		}
	}
}

// isBenchModule reports whether dir is the tree's bench module (its go.mod beside
// cmd/qmqbench).
func isBenchModule(dir string) bool {
	_, errMod := os.Stat(filepath.Join(dir, "go.mod"))
	_, errCmd := os.Stat(filepath.Join(dir, "cmd", "qmqbench"))
	return errMod == nil && errCmd == nil
}

func relTo(base, target string) string {
	if rel, err := filepath.Rel(base, target); err == nil {
		return rel
	}
	return target
}
