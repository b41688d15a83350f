package auth

import (
	"crypto/subtle"
	"fmt"
	"regexp"
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

// ValidTenant reports whether name is a valid tenant name (one topic token of
// [A-Za-z0-9_-], 1-64 characters).
func ValidTenant(name string) bool { return tenantRE.MatchString(name) }

// durableRE is the grammar of durable consumer and group names as a client gives them;
// namespacedRE that of the names a node of the region relays or the operator gives, which
// may carry a tenant's namespace ("tenant/T/NAME").
var (
	durableRE    = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,255}$`)
	namespacedRE = regexp.MustCompile(`^[A-Za-z0-9_./-]{1,400}$`)
)

// ValidConsumerName reports whether name is a valid consumer name: 1-255 characters of
// [A-Za-z0-9_.-] as a client gives it, or, namespaced (from a peer node or the operator),
// 1-400 characters that may include "/".
func ValidConsumerName(name string, namespaced bool) bool {
	if namespaced {
		return namespacedRE.MatchString(name)
	}
	return durableRE.MatchString(name)
}

// Validate says what is wrong with c, if anything.
func (c Credential) Validate() error {
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
type Principal struct {
	Name   string // for logs: "tenant acme", "token #3", "certificate ops-1", "anonymous"
	Tenant string
	Prefix string // tenant + "." or ""
	pub    []string
	sub    []string
}

var (
	Everything = &Principal{Name: "anonymous"}
	PeerActor  = &Principal{Name: "peer"}
)

func NewPrincipal(name string, c Credential) *Principal {
	p := &Principal{Name: name, Tenant: c.Tenant, pub: c.Publish, sub: c.Subscribe}
	if c.Tenant != "" {
		p.Prefix = c.Tenant + "."
		p.Name += " (tenant " + c.Tenant + ")"
	}
	return p
}

// credentials are the node's tokens and client certificates; empty: anonymous.
type Credentials []Credential

// authenticate finds the credential for a HELLO token or a client certificate's subject:
// nil when neither is valid. Tokens are compared in constant time, all of them.
func (creds Credentials) Authenticate(token, subject string) *Principal {
	if len(creds) == 0 {
		return Everything
	}
	var found *Principal
	for i, c := range creds {
		if c.Token != "" && subtle.ConstantTimeCompare([]byte(c.Token), []byte(token)) == 1 && found == nil {
			found = NewPrincipal(fmt.Sprintf("token #%d", i), c)
		}
	}
	if found != nil || subject == "" {
		return found
	}
	for _, c := range creds {
		if c.Subject != "" && c.Subject == subject {
			return NewPrincipal("certificate "+subject, c)
		}
	}
	return nil
}

// topic maps a client's topic or pattern to the node's namespace.
func (p *Principal) Topic(name string) string { return p.Prefix + name }

// clientName maps a stored topic name back to the client's view.
func (p *Principal) ClientName(name string) string { return strings.TrimPrefix(name, p.Prefix) }

// durable maps a client's durable consumer name into the tenant's namespace. The "/" keeps
// it apart from every name a client can choose (durableRE has none) and from mirror cursors.
func (p *Principal) Durable(name string) string {
	if p.Tenant == "" || name == "" {
		return name
	}
	return "tenant/" + p.Tenant + "/" + name
}

// subjectMessage is a routing error as an ERROR or PUBLISH_ERROR message: without the Go
// package's prefix, which means nothing to a client (`invalid topic "a..b": empty token at
// byte 2`).
func SubjectMessage(err error) string {
	return strings.TrimPrefix(err.Error(), "routing: ")
}

// checkTopic validates a client's topic, as the client named it and with its namespace.
func (p *Principal) CheckTopic(name string, pattern bool) *wire.Error {
	validate := routing.ValidateTopic
	if pattern {
		validate = routing.ValidatePattern
	}
	if err := validate(name); err != nil {
		return &wire.Error{Code: wire.CodeInvalidTopic, Message: SubjectMessage(err)}
	}
	if p.Prefix != "" {
		if err := validate(p.Topic(name)); err != nil {
			return wire.Errorf(wire.CodeInvalidTopic, "%q is too long or has too many tokens inside tenant %q's namespace (%q): %v",
				name, p.Tenant, p.Prefix, SubjectMessage(err))
		}
	}
	return nil
}

// mayPublish refuses a publish to topic (the client's name) outside the grant.
func (p *Principal) MayPublish(topic string) *wire.Error {
	if p.pub == nil {
		return nil
	}
	for _, a := range p.pub {
		if routing.Match(a, topic) {
			return nil
		}
	}
	return wire.Errorf(wire.CodeForbidden, "%s may not publish to %q (allowed: %s)", p.Name, topic, grantList(p.pub))
}

// maySubscribe refuses a subscription (or replay, or listing) whose pattern reaches beyond
// the grant: every topic it can match must be allowed.
func (p *Principal) MaySubscribe(pattern string) *wire.Error {
	if p.sub == nil {
		return nil
	}
	for _, a := range p.sub {
		if routing.Covers(a, pattern) {
			return nil
		}
	}
	return wire.Errorf(wire.CodeForbidden, "%s may not subscribe to %q (allowed: %s)", p.Name, pattern, grantList(p.sub))
}

func grantList(ps []string) string {
	if len(ps) == 0 {
		return "nothing"
	}
	return strings.Join(ps, ", ")
}

// clientDurable is a stored durable or group name as the client named it.
func (p *Principal) ClientDurable(name string) string {
	if p.Tenant == "" {
		return name
	}
	return strings.TrimPrefix(name, "tenant/"+p.Tenant+"/")
}

// consumerPrefix is the prefix of a's stored durable and group names: "" or "tenant/T/".
func ConsumerPrefix(a *Principal) string {
	if a.Tenant == "" {
		return ""
	}
	return "tenant/" + a.Tenant + "/"
}

// consumerView is the name a client of a sees for stored consumer name.
func (a *Principal) ConsumerView(name string) string {
	return strings.TrimPrefix(name, ConsumerPrefix(a))
}

// mayManageConsumer refuses a consumer op unless a may subscribe to every topic (node
// names) the consumer has a position on: the grant that lets a client consume a topic lets
// it see and move a consumer of it.
func (a *Principal) MayManageConsumer(topics []string) *wire.Error {
	for _, t := range topics {
		if e := a.MaySubscribe(a.ClientName(t)); e != nil {
			return e
		}
	}
	return nil
}
