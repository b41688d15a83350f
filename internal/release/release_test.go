package release

import (
	"os/exec"
	"strings"
	"testing"
)

func TestEmbeddedFileParses(t *testing.T) {
	rs, err := Parse(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) < 2 {
		t.Fatalf("RELEASES lists %d releases; the upgrade campaign needs a previous one", len(rs))
	}
	if p, ok := Previous(); !ok || p != rs[len(rs)-2] || Latest() != rs[len(rs)-1] {
		t.Errorf("Previous %v %v, Latest %v of %v", p, ok, Latest(), rs)
	}
	if r, ok := Named(rs[0].Name); !ok || r != rs[0] {
		t.Errorf("Named(%s) = %v %v", rs[0].Name, r, ok)
	}
	if _, ok := Named("v9.9.9"); ok {
		t.Error("Named found a release that is not listed")
	}
}

func TestParseRefusesEveryBadLine(t *testing.T) {
	const c = "f075aaa371410bc9ebb6a9bdbfca291a46ee5b64"
	_, err := Parse("# comment\n\nv1 " + c + " 2026-12-05\nv0.1.0 F075AAA 2026-12-05\nv0.2.0 " + c + " 5.12.2026\nv0.3.0 " + c + "\n")
	if err == nil {
		t.Fatal("a malformed file parsed")
	}
	for _, want := range []string{`line 3: name "v1"`, `line 4: commit "F075AAA"`, `line 5: date "5.12.2026"`, "line 5: v0.2.0 or " + c + " listed twice", "line 6: 2 fields"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := Parse("# only comments\n"); err == nil {
		t.Error("a file of comments parsed")
	}
}

func TestNameOf(t *testing.T) {
	for _, r := range All() {
		if got := NameOf(r.Commit); got != r.Name {
			t.Errorf("NameOf(%s) = %q, want %q", r.Commit, got, r.Name)
		}
		if got := NameOf(r.Commit[:12]); got != r.Name {
			t.Errorf("NameOf(%s) = %q, want %q", r.Commit[:12], got, r.Name)
		}
	}
	for _, rev := range []string{"", "unknown", "f0", "0000000000000000000000000000000000000000"} {
		if got, want := NameOf(rev), Latest().Name+"+dev"; got != want {
			t.Errorf("NameOf(%q) = %q, want %q", rev, got, want)
		}
	}
}

// TestReleasesAreThisHistory: in a git clone that has them, every release's commit exists,
// each is an ancestor of the next and of HEAD, and its date is its commit date. A clone
// without the history (a tarball, a shallow clone) skips what it cannot see.
func TestReleasesAreThisHistory(t *testing.T) {
	if err := exec.Command("git", "rev-parse", "--git-dir").Run(); err != nil {
		t.Skip("not a git checkout")
	}
	prev := ""
	for _, r := range All() {
		out, err := exec.Command("git", "show", "-s", "--format=%cd", "--date=short", r.Commit+"^{commit}").Output()
		if err != nil {
			t.Logf("%s: commit %s is not in this clone: not checked", r.Name, r.Commit)
			prev = ""
			continue
		}
		if d := strings.TrimSpace(string(out)); d != r.Date {
			t.Errorf("%s: date %s, but commit %s is of %s", r.Name, r.Date, r.Commit[:12], d)
		}
		for _, later := range []string{"HEAD", prev} {
			if later == "" {
				continue
			}
			a, b := r.Commit, later
			if later == prev {
				a, b = prev, r.Commit
			}
			if err := exec.Command("git", "merge-base", "--is-ancestor", a, b).Run(); err != nil {
				t.Errorf("%s: %s is not an ancestor of %s (releases are listed oldest first, on this history)", r.Name, a[:12], b)
			}
		}
		prev = r.Commit
	}
}
