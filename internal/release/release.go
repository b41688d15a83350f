package release

import (
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

//go:embed RELEASES
var file string

// Release is one line of RELEASES.
type Release struct {
	Name   string // v<major>.<minor>.<patch>
	Commit string // the full commit hash the release is
	Date   string // its commit date, YYYY-MM-DD
}

var (
	nameRE   = regexp.MustCompile(`^v\d+\.\d+\.\d+$`)
	commitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// Parse reads a releases file: one release a line (NAME COMMIT DATE), oldest first; blank
// lines and lines starting with # are comments. It reports every malformed line at once.
func Parse(text string) ([]Release, error) {
	var out []Release
	var errs []error
	seen := map[string]bool{}
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			errs = append(errs, fmt.Errorf("release: line %d: %d fields, want NAME COMMIT DATE", i+1, len(f)))
			continue
		}
		r := Release{Name: f[0], Commit: f[1], Date: f[2]}
		if !nameRE.MatchString(r.Name) {
			errs = append(errs, fmt.Errorf("release: line %d: name %q is not v<major>.<minor>.<patch>", i+1, r.Name))
		}
		if !commitRE.MatchString(r.Commit) {
			errs = append(errs, fmt.Errorf("release: line %d: commit %q is not 40 lower-case hex digits", i+1, r.Commit))
		}
		if _, err := time.Parse(time.DateOnly, r.Date); err != nil {
			errs = append(errs, fmt.Errorf("release: line %d: date %q is not YYYY-MM-DD", i+1, r.Date))
		}
		if seen[r.Name] || seen[r.Commit] {
			errs = append(errs, fmt.Errorf("release: line %d: %s or %s listed twice", i+1, r.Name, r.Commit))
		}
		seen[r.Name], seen[r.Commit] = true, true
		out = append(out, r)
	}
	if len(out) == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("release: no release listed"))
	}
	return out, errors.Join(errs...)
}

// All is every release this build knows, oldest first. The embedded file is checked by the
// package's tests, so All panics only on a build whose RELEASES was broken by hand.
func All() []Release {
	rs, err := Parse(file)
	if err != nil {
		panic(err)
	}
	return rs
}

// Latest is the newest release this build knows.
func Latest() Release {
	rs := All()
	return rs[len(rs)-1]
}

// Previous is the release before Latest, and false when only one is listed.
func Previous() (Release, bool) {
	rs := All()
	if len(rs) < 2 {
		return Release{}, false
	}
	return rs[len(rs)-2], true
}

// Named is the release called name, and false when none is.
func Named(name string) (Release, bool) {
	for _, r := range All() {
		if r.Name == name {
			return r, true
		}
	}
	return Release{}, false
}

// NameOf is the name of the build of commit rev (a full hash or a prefix of at least 7
// digits): the release's name when rev is a release's commit, else the latest release's name
// with "+dev" (a build of a later commit, or of an unknown one: this tree lists no release
// newer than itself).
func NameOf(rev string) string {
	if len(rev) >= 7 {
		for _, r := range All() {
			if strings.HasPrefix(r.Commit, rev) {
				return r.Name
			}
		}
	}
	return Latest().Name + "+dev"
}
