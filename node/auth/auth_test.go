package auth

import (
	"testing"

	"github.com/quicmq/quicmq/internal/wire"
)

func TestAuthenticate(t *testing.T) {
	creds := Credentials{
		{Token: "0123456789abcdef", Tenant: "acme", Publish: []string{"orders.>"}, Subscribe: []string{"orders.*"}},
		{Subject: "ops-1"},
	}
	if p := (Credentials{}).Authenticate("", ""); p != Everything {
		t.Fatalf("no credentials: %v, want anonymous", p)
	}
	if p := creds.Authenticate("wrong-token-0000", ""); p != nil {
		t.Fatalf("a wrong token authenticated as %q", p.Name)
	}
	if p := creds.Authenticate("", "ops-2"); p != nil {
		t.Fatalf("an unknown certificate authenticated as %q", p.Name)
	}
	p := creds.Authenticate("0123456789abcdef", "")
	if p == nil || p.Tenant != "acme" || p.Name != "token #0 (tenant acme)" {
		t.Fatalf("token: %+v", p)
	}
	if c := creds.Authenticate("", "ops-1"); c == nil || c.Tenant != "" || c.Name != "certificate ops-1" {
		t.Fatalf("certificate: %+v", c)
	}

	// The tenant's namespace, both ways.
	if got := p.Topic("orders.1"); got != "acme.orders.1" {
		t.Errorf("Topic: %q", got)
	}
	if got := p.ClientName("acme.orders.1"); got != "orders.1" {
		t.Errorf("ClientName: %q", got)
	}
	if got := p.Durable("billing"); got != "tenant/acme/billing" {
		t.Errorf("Durable: %q", got)
	}
	if got := p.ClientDurable("tenant/acme/billing"); got != "billing" {
		t.Errorf("ClientDurable: %q", got)
	}
	if got := Everything.Durable("billing"); got != "billing" {
		t.Errorf("Durable without a tenant: %q", got)
	}

	// Grants: a publish inside, a subscription that reaches beyond.
	if e := p.MayPublish("orders.eu.1"); e != nil {
		t.Errorf("MayPublish inside the grant: %v", e)
	}
	if e := p.MayPublish("billing.1"); e == nil || e.Code != wire.CodeForbidden {
		t.Errorf("MayPublish outside the grant: %v", e)
	}
	if e := p.MaySubscribe("orders.>"); e == nil || e.Code != wire.CodeForbidden {
		t.Errorf("MaySubscribe wider than the grant: %v", e)
	}
	if e := p.MayManageConsumer([]string{"acme.orders.1", "acme.billing.2"}); e == nil {
		t.Error("MayManageConsumer with a topic outside the grant: allowed")
	}
	if e := p.CheckTopic("orders..1", false); e == nil || e.Code != wire.CodeInvalidTopic {
		t.Errorf("CheckTopic of a bad name: %v", e)
	}
}

func TestCredentialValidate(t *testing.T) {
	for _, c := range []struct {
		cred Credential
		ok   bool
	}{
		{Credential{Token: "0123456789abcdef"}, true},
		{Credential{Subject: "ops-1", Tenant: "acme"}, true},
		{Credential{}, false},
		{Credential{Token: "short"}, false},
		{Credential{Token: "0123456789abcdef", Subject: "ops-1"}, false},
		{Credential{Token: "0123456789abcdef", Tenant: "a.b"}, false},
		{Credential{Token: "0123456789abcdef", Publish: []string{"a..b"}}, false},
	} {
		if err := c.cred.Validate(); (err == nil) != c.ok {
			t.Errorf("%+v: Validate = %v, want ok %v", c.cred, err, c.ok)
		}
	}
	if !ValidTenant("acme-1") || ValidTenant("") || ValidTenant("a.b") {
		t.Error("ValidTenant")
	}
}
