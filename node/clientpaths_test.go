package node

import (
	"context"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/internal/testlog"
)

// TestClientPaths: the node watches its client connections only (a link from another node
// counts its own migrations), counts a client's migration once, and a migration adds no
// accepted connection.
func TestClientPaths(t *testing.T) {
	m := newTestMeshWith(t, func(_ string, c *Config) { c.ClientPathInterval = 10 * time.Millisecond }, "eu", "us")
	eu := m.nodes["eu"]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := dialNode(t, eu, client.Options{MigrateCheck: -1})
	eu.paths.mu.Lock()
	watched := len(eu.paths.mu.conns)
	eu.paths.mu.Unlock()
	if watched != 1 {
		t.Fatalf("node watches %d connections, want 1: the client's, not the link from us", watched)
	}
	if err := c.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, client.Message{Topic: "paths.t", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	testlog.WaitFor(t, 20*time.Second, "the node to count the client's migration", func() bool {
		return metricValue(t, eu, "quicmq_client_migrations_total", "") >= 1
	})
	if got := metricValue(t, eu, "quicmq_client_migrations_total", ""); got != 1 {
		t.Errorf("quicmq_client_migrations_total = %v, want 1", got)
	}
	if got := metricValue(t, eu, "quicmq_client_connections_total", ""); got != 1 {
		t.Errorf("quicmq_client_connections_total = %v, want 1", got)
	}
	c.Close()
	testlog.WaitFor(t, 20*time.Second, "the closed client's connection to be watched no more", func() bool {
		eu.paths.mu.Lock()
		defer eu.paths.mu.Unlock()
		return len(eu.paths.mu.conns) == 0
	})
}
