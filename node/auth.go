package node

import (
	"crypto/subtle"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/routing"
)

// Credential is what one client credential (a token, or a client certificate) may do.
type Credential struct {
	// Token is the secret a client presents in HELLO (16+ characters). Empty when the
	// credential is a client certificate's (Subject).
	Token string
	// Subject is the Common Name of a client certificate, issued by the mesh CA with the
	// client-authentication usage only (`quicmq certs client`), that authenticates as this
	// credential without a token.
	Subject string
	// Tenant confines the client to its own namespace: every topic, pattern and durable name
	// it uses is the tenant's, stored as "TENANT.topic", invisible to other tenants. Empty:
	// the node's whole namespace (operators, or a single-tenant deployment).
	Tenant string
	// Publish and Subscribe are the patterns, within the tenant's namespace, the client may
	// publish to and subscribe to (replays and listings included). Nil: everything; empty
	// non-nil: nothing.
	Publish, Subscribe []string
}

// tenantRE is the grammar of tenant names: one topic token, so "TENANT." prefixes a topic.
var tenantRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func (c Credential) validate() error {
	switch {
	case c.Token == "" && c.Subject == "":
		return fmt.Errorf("neither Token nor Subject set")
	case c.Token != "" && c.Subject != "":
		return fmt.Errorf("both Token and Subject set: one credential is one or the other")
	case c.Token != "" && len(c.Token) < 16:
		return fmt.Errorf("Token: at least 16 characters, got %d", len(c.Token))
	case c.Tenant != "" && !tenantRE.MatchString(c.Tenant):
		return fmt.Errorf("Tenant %q: want 1-64 characters of [A-Za-z0-9_-]", c.Tenant)
	}
	for _, p := range append(append([]string(nil), c.Publish...), c.Subscribe...) {
		if err := routing.ValidatePattern(p); err != nil {
			return err
		}
	}
	return nil
}

// principal is who a session acts for: its namespace and permissions. Peers and anonymous
// clients have the whole namespace and every permission.
type principal struct {
	name   string // for logs: "tenant acme", "token #3", "certificate ops-1", "anonymous"
	tenant string
	prefix string // tenant + "." or ""
	pub    []string
	sub    []string
}

var (
	everything = &principal{name: "anonymous"}
	peerActor  = &principal{name: "peer"}
)

func newPrincipal(name string, c Credential) *principal {
	p := &principal{name: name, tenant: c.Tenant, pub: c.Publish, sub: c.Subscribe}
	if c.Tenant != "" {
		p.prefix = c.Tenant + "."
		p.name += " (tenant " + c.Tenant + ")"
	}
	return p
}

// authenticate finds the credential for a HELLO token or a client certificate's subject:
// nil when neither is valid. Tokens are compared in constant time, all of them.
func (n *Node) authenticate(token, subject string) *principal {
	if len(n.creds) == 0 {
		return everything
	}
	var found *principal
	for i, c := range n.creds {
		if c.Token != "" && subtle.ConstantTimeCompare([]byte(c.Token), []byte(token)) == 1 && found == nil {
			found = newPrincipal(fmt.Sprintf("token #%d", i), c)
		}
	}
	if found != nil || subject == "" {
		return found
	}
	for _, c := range n.creds {
		if c.Subject != "" && c.Subject == subject {
			return newPrincipal("certificate "+subject, c)
		}
	}
	return nil
}

// topic maps a client's topic or pattern to the node's namespace.
func (p *principal) topic(name string) string { return p.prefix + name }

// clientName maps a stored topic name back to the client's view.
func (p *principal) clientName(name string) string { return strings.TrimPrefix(name, p.prefix) }

// durable maps a client's durable consumer name into the tenant's namespace. The "/" keeps
// it apart from every name a client can choose (durableRE has none) and from mirror cursors.
func (p *principal) durable(name string) string {
	if p.tenant == "" || name == "" {
		return name
	}
	return "tenant/" + p.tenant + "/" + name
}

// subjectMessage is a routing error as an ERROR or PUBLISH_ERROR message: without the Go
// package's prefix, which means nothing to a client (`invalid topic "a..b": empty token at
// byte 2`).
func subjectMessage(err error) string {
	return strings.TrimPrefix(err.Error(), "routing: ")
}

// checkTopic validates a client's topic, as the client named it and with its namespace.
func (p *principal) checkTopic(name string, pattern bool) *wire.Error {
	validate := routing.ValidateTopic
	if pattern {
		validate = routing.ValidatePattern
	}
	if err := validate(name); err != nil {
		return &wire.Error{Code: wire.CodeInvalidTopic, Message: subjectMessage(err)}
	}
	if p.prefix != "" {
		if err := validate(p.topic(name)); err != nil {
			return wire.Errorf(wire.CodeInvalidTopic, "%q is too long or has too many tokens inside tenant %q's namespace (%q): %v",
				name, p.tenant, p.prefix, subjectMessage(err))
		}
	}
	return nil
}

// mayPublish refuses a publish to topic (the client's name) outside the grant.
func (p *principal) mayPublish(topic string) *wire.Error {
	if p.pub == nil {
		return nil
	}
	for _, a := range p.pub {
		if routing.Match(a, topic) {
			return nil
		}
	}
	return wire.Errorf(wire.CodeForbidden, "%s may not publish to %q (allowed: %s)", p.name, topic, grantList(p.pub))
}

// maySubscribe refuses a subscription (or replay, or listing) whose pattern reaches beyond
// the grant: every topic it can match must be allowed.
func (p *principal) maySubscribe(pattern string) *wire.Error {
	if p.sub == nil {
		return nil
	}
	for _, a := range p.sub {
		if routing.Covers(a, pattern) {
			return nil
		}
	}
	return wire.Errorf(wire.CodeForbidden, "%s may not subscribe to %q (allowed: %s)", p.name, pattern, grantList(p.sub))
}

// checkDurables refuses a tenant's new durable consumer or consumer group past
// MaxDurablesPerTenant (counting the durables with a position and the groups with state
// stored on this node: both are stored state that only `consumers rm` removes).
func (n *Node) checkDurables(a *principal, durable string) *wire.Error {
	if durable == "" {
		return nil
	}
	prefix := "tenant/" + a.tenant + "/"
	names := n.wal.PositionNames(prefix)
	groups, isGroup := n.groupCount(prefix, durable)
	if len(names)+groups < n.cfg.MaxDurablesPerTenant || slices.Contains(names, durable) || isGroup {
		return nil
	}
	return wire.Errorf(wire.CodeLimit, "tenant %q has %d durable consumers and consumer groups on this node, the limit is %d (MaxDurablesPerTenant); reuse one, or remove one with `quicmq consumers rm NAME` (`quicmq consumers` lists them)",
		a.tenant, len(names)+groups, n.cfg.MaxDurablesPerTenant)
}

func grantList(ps []string) string {
	if len(ps) == 0 {
		return "nothing"
	}
	return strings.Join(ps, ", ")
}
