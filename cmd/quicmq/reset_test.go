package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
)

// A node killed and restarted on the same address answers its predecessor's connections with
// a stateless reset (its key is kept in DATA/reset.key), so a client connected before the kill
// learns at its next packet that the connection is gone, instead of waiting for the 30 s idle
// timeout.
func TestRestartedNodeResetsOldConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills node processes")
	}
	bin := quicmqBinary(t)
	data, addr := t.TempDir(), freeAddr(t)
	p := startMeshProcess(t, bin, "reset", "--data", data, "--listen", addr)
	conn, err := client.Dial(context.Background(), client.Options{CAFile: data + "/tls/ca.pem"}, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Publish(context.Background(), client.Message{Topic: "r", Payload: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	p.Kill()
	startMeshProcess(t, bin, "reset", "--data", data, "--listen", addr)

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = conn.Publish(ctx, client.Message{Topic: "r", Payload: []byte("after")})
	took := time.Since(start)
	if err == nil {
		t.Fatal("a publish on the dead node's connection succeeded")
	}
	if errors.Is(err, context.DeadlineExceeded) || took > 5*time.Second {
		t.Fatalf("the old connection was not reset: %v after %v", err, took)
	}
	t.Logf("old connection ended %v after the restart: %v", took.Round(time.Millisecond), err)
	c2, err := client.Dial(context.Background(), client.Options{CAFile: data + "/tls/ca.pem"}, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if ack, err := c2.Publish(context.Background(), client.Message{Topic: "r", Payload: []byte("again")}); err != nil || ack.Offset != 1 {
		t.Fatalf("a new connection: %+v %v", ack, err)
	}
}
