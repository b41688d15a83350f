package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestResultsDirFromAnywhereInTheTree: run from the root, from bench/ or below it, results go
// to the tree's bench/results (a run from bench/ used to write bench/bench/results).
func TestResultsDirFromAnywhereInTheTree(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"bench/cmd/qmqbench", "bench/lossy", "elsewhere"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"go.mod", "bench/go.mod"} {
		if err := os.WriteFile(filepath.Join(root, f), []byte("module x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ cwd, want string }{
		{".", "bench/results"},
		{"bench", "results"},
		{"bench/lossy", "../results"},
		{"elsewhere", "../bench/results"},
	} {
		t.Chdir(filepath.Join(root, c.cwd))
		if got := resultsDir(); got != c.want {
			t.Errorf("from %s: results in %q, want %q", c.cwd, got, c.want)
		}
	}
	t.Chdir(t.TempDir())
	if got := resultsDir(); got != "bench/results" {
		t.Errorf("outside the tree: results in %q, want bench/results", got)
	}
}
