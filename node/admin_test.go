package node_test

import (
	"bytes"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/quicmq/quicmq/gossip"
	"github.com/quicmq/quicmq/node"
	"github.com/quicmq/quicmq/node/manage"
	"github.com/quicmq/quicmq/node/nodetest"
)

func adminRequest(t *testing.T, srv *httptest.Server, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The admin API's state-changing endpoints are refused, naming the flag that enables them,
// unless the node was started with AdminAPI; the read-only ones are served either way.
func TestAdminStateChangingNeedsFlag(t *testing.T) {
	oldKey := bytes.Repeat([]byte{1}, 32)
	newKey := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 32))
	for _, enabled := range []bool{false, true} {
		n, _ := nodetest.Start(t, func(c *node.Config) {
			c.GossipLAN, c.GossipProfile, c.GossipKey, c.AdminAPI = "127.0.0.1:0", gossip.ProfileTest, oldKey, enabled
		})
		srv := httptest.NewServer(n.AdminHandler())
		defer srv.Close()
		for _, path := range []string{"/metrics", "/v1/members", "/v1/links", "/v1/gossip/keys"} {
			if code, body := adminRequest(t, srv, http.MethodGet, path, ""); code != http.StatusOK {
				t.Errorf("AdminAPI %v: GET %s: %d %s", enabled, path, code, body)
			}
		}
		for _, q := range []string{"mirrors=-1", "mirrors=x"} {
			if code, body := adminRequest(t, srv, http.MethodGet, "/v1/links?"+q, ""); code != http.StatusBadRequest || !strings.Contains(body, "mirrors=") {
				t.Errorf("GET /v1/links?%s: %d %q, want 400 naming mirrors=", q, code, body)
			}
		}
		code, body := adminRequest(t, srv, http.MethodPost, "/v1/gossip/keys/install", newKey)
		migrate, migrateBody := adminRequest(t, srv, http.MethodPost, "/v1/links/migrate", "")
		if !enabled {
			for _, r := range []struct {
				code int
				body string
			}{{code, body}, {migrate, migrateBody}} {
				if r.code != http.StatusForbidden || !strings.Contains(r.body, "--admin-api") || !strings.Contains(r.body, "admin_api") {
					t.Errorf("without AdminAPI: %d %q, want 403 naming --admin-api and admin_api", r.code, r.body)
				}
			}
			if _, keys := adminRequest(t, srv, http.MethodGet, "/v1/gossip/keys", ""); strings.Contains(keys, manage.KeyFingerprint(bytes.Repeat([]byte{2}, 32))) {
				t.Errorf("a refused install changed the keyring: %s", keys)
			}
			continue
		}
		if code != http.StatusOK {
			t.Fatalf("with AdminAPI: install: %d %s", code, body)
		}
		if _, keys := adminRequest(t, srv, http.MethodGet, "/v1/gossip/keys", ""); !strings.Contains(keys, manage.KeyFingerprint(bytes.Repeat([]byte{2}, 32))) {
			t.Errorf("with AdminAPI: the installed key is not in the keyring: %s", keys)
		}
		// A standalone link table: served (not refused), and says why nothing migrated.
		if migrate == http.StatusForbidden {
			t.Errorf("with AdminAPI: migrate refused: %s", migrateBody)
		}
	}
}
