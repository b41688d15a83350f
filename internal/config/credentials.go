package config

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/quicmq/quicmq/routing"
)

// Credential is one line of a token file (`--token-file`, `token_file`):
//
//	TOKEN                                             full access to the whole namespace
//	TOKEN tenant=acme publish=orders.> subscribe=>    a tenant's token with grants
//	cert:COMMON_NAME tenant=acme subscribe=orders.*   a client certificate's grants
//
// publish= and subscribe= take comma-separated patterns inside the tenant's namespace;
// absent means everything, "-" means nothing.
type Credential struct {
	Token   string // or
	Subject string // the client certificate's Common Name (from "cert:NAME")
	Tenant  string
	// Publish and Subscribe: nil when absent (everything), empty when "-" (nothing).
	Publish, Subscribe []string
	Line               int
}

var tenantRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ParseCredentials parses a token file's text. It returns every problem, each with its
// line number, instead of stopping at the first.
func ParseCredentials(text string) ([]Credential, []string) {
	var out []Credential
	var problems []string
	seen := make(map[string]int)
	for i, line := range strings.Split(text, "\n") {
		n := i + 1
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		bad := func(format string, args ...any) {
			problems = append(problems, fmt.Sprintf("line %d: ", n)+fmt.Sprintf(format, args...))
		}
		c := Credential{Line: n}
		if subject, ok := strings.CutPrefix(fields[0], "cert:"); ok {
			if subject == "" {
				bad("cert: needs the client certificate's Common Name, as in cert:billing-svc")
			}
			c.Subject = subject
		} else if msg := checkToken(fields[0]); msg != "" {
			bad("%s", msg)
		} else {
			c.Token = fields[0]
		}
		for _, f := range fields[1:] {
			k, v, ok := strings.Cut(f, "=")
			switch {
			case !ok:
				bad("%q: want key=value (tenant=, publish= or subscribe=)", f)
			case k == "tenant":
				if !tenantRE.MatchString(v) {
					bad("tenant %q: want 1-64 characters of [A-Za-z0-9_-]", v)
				}
				c.Tenant = v
			case k == "publish" || k == "subscribe":
				ps := []string{}
				if v != "-" {
					for _, p := range strings.Split(v, ",") {
						if err := routing.ValidatePattern(p); err != nil {
							bad("%s: %v", k, err)
						}
						ps = append(ps, p)
					}
				}
				if k == "publish" {
					c.Publish = ps
				} else {
					c.Subscribe = ps
				}
			default:
				bad("unknown key %q: want tenant=, publish= or subscribe=", k)
			}
		}
		id := "token:" + c.Token
		if c.Subject != "" {
			id = "cert:" + c.Subject
		}
		if prev, dup := seen[id]; dup {
			bad("the same credential as line %d", prev)
		}
		seen[id] = n
		out = append(out, c)
	}
	return out, problems
}
