package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/quicmq/quicmq/client"
)

// The examples expect a node on 127.0.0.1:7400 such as the first one 'quicmq dev' starts,
// and its CA where dev writes it: /tmp/quicmq-dev-XXXX/ca/ca.pem (XXXX is random: dev prints
// the path; with --data DIR it is DIR/ca/ca.pem). They are compiled, not run.

// Quick start: dial a node, publish a record, then read the topic as a durable consumer and
// acknowledge each record (a durable consumer resumes after its last acknowledged record).
func Example() {
	ctx := context.Background()
	conn, err := client.Dial(ctx, client.Options{CAFile: "/tmp/quicmq-dev-XXXX/ca/ca.pem"}, "127.0.0.1:7400")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ack, err := conn.Publish(ctx, client.Message{Topic: "demo.hello", Payload: []byte("hi")})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("stored at offset", ack.Offset)
	sub, err := conn.Subscribe(ctx, "demo.>", client.SubscribeOptions{Durable: "quickstart"})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	for rec, err := range sub.Records(ctx) {
		if err != nil {
			log.Fatal(err) // or skip a *client.GapError: records retention deleted
		}
		fmt.Printf("%s@%d: %s\n", rec.Topic, rec.Offset, rec.Payload)
		if err := sub.Ack(rec); err != nil {
			log.Fatal(err)
		}
	}
}

// Flush waits for every publish issued before it, without keeping the Futures.
func ExampleConn_Flush() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Options{CAFile: "/tmp/quicmq-dev-XXXX/ca/ca.pem"}, "127.0.0.1:7400")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	for i := range 1000 {
		if _, err := c.PublishAsync(ctx, client.Message{Topic: "metrics.cpu", Payload: fmt.Appendf(nil, "sample %d", i)}); err != nil {
			log.Fatal(err)
		}
	}
	if err := c.Flush(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("every publish answered")
}

// A client certificate from 'quicmq certs client --name billing --out billing', for a node
// that knows its clients by certificate (a credential "cert:billing" in its token file).
func ExampleOptions_clientCertificate() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Options{
		CAFile:   "billing/ca.pem",
		CertFile: "billing/client.pem",
		KeyFile:  "billing/client-key.pem",
	}, "10.0.0.1:7400", "10.0.0.2:7400")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	name, region := c.Node()
	fmt.Println("authenticated by certificate to", name, "in", region)
}

func ExampleDial() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{CAFile: "/tmp/quicmq-dev-XXXX/ca/ca.pem"}, "127.0.0.1:7400")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	name, region := c.Node()
	fmt.Println("connected to", name, "in", region)
}

func ExampleConn_Publish() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Options{CAFile: "/tmp/quicmq-dev-XXXX/ca/ca.pem"}, "127.0.0.1:7400")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ack, err := c.Publish(ctx, client.Message{Topic: "orders.eu.created", Payload: []byte(`{"id":1}`)})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("durable at offset", ack.Offset)
}

// Pipelining: send many publishes, then collect the acks. Only MaxPendingPublishes are in
// flight at once; PublishAsync blocks while the window is full.
func ExampleConn_PublishAsync() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Options{CAFile: "/tmp/quicmq-dev-XXXX/ca/ca.pem", MaxPendingPublishes: 512}, "127.0.0.1:7400")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	var futures []*client.Future
	for i := range 10_000 {
		f, err := c.PublishAsync(ctx, client.Message{Topic: "metrics.cpu", Payload: fmt.Appendf(nil, "sample %d", i)})
		if err != nil {
			log.Fatal(err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		if _, err := f.Wait(ctx); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("all durable")
}

// A durable consumer: it resumes after the last record it acknowledged, also after a restart.
func ExampleConn_Subscribe() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Options{CAFile: "/tmp/quicmq-dev-XXXX/ca/ca.pem"}, "127.0.0.1:7400")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	sub, err := c.Subscribe(ctx, "orders.>", client.SubscribeOptions{Durable: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close() // waits until the node has every ack
	for {
		r, err := sub.Next(ctx)
		var gap *client.GapError
		if errors.As(err, &gap) {
			log.Printf("lost to retention: %v", gap)
			continue
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s@%d: %s\n", r.Topic, r.Offset, r.Payload)
		if err := sub.Ack(r); err != nil {
			log.Fatal(err)
		}
	}
}

// Records from a point in time, with a range loop; stop after a quiet second.
func ExampleSubscription_Records() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Options{CAFile: "/tmp/quicmq-dev-XXXX/ca/ca.pem"}, "127.0.0.1:7400")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	sub, err := c.Subscribe(ctx, "orders.*.created", client.SubscribeOptions{From: client.AtTime(time.Now().Add(-time.Hour))})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	quiet, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	for r, err := range sub.Records(quiet) {
		if err != nil {
			break // the quiet second passed (or the subscription failed)
		}
		fmt.Printf("%s@%d at %v\n", r.Topic, r.Offset, r.Time)
	}
}

// Errors from the node carry a code.
func ExampleError() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Options{CAFile: "/tmp/quicmq-dev-XXXX/ca/ca.pem"}, "127.0.0.1:7400")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	_, err = c.Publish(ctx, client.Message{Topic: "orders..created"})
	var e *client.Error
	if errors.As(err, &e) && e.Code == client.CodeInvalidTopic {
		fmt.Println("bad topic:", e.Message)
	}
}

func ExampleConn_Topics() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Options{CAFile: "/tmp/quicmq-dev-XXXX/ca/ca.pem"}, "127.0.0.1:7400")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	topics, err := c.Topics(ctx, "orders.>")
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range topics {
		fmt.Printf("%s: offsets %d..%d, %d records\n", t.Name, t.First, t.Next, t.Records())
	}
}

// Idempotent publishing across restarts: with Idempotent and Reconnect, publishes in flight
// when the node restarts are resent on a new connection, and the node stores each once; an
// ack for a record an earlier attempt had stored says so.
func ExampleOptions_idempotent() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Options{CAFile: "/tmp/quicmq-dev-XXXX/ca/ca.pem", Reconnect: true, Idempotent: true}, "127.0.0.1:7400")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ack, err := c.Publish(ctx, client.Message{Topic: "orders.eu.created", Payload: []byte(`{"id":1}`)})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("stored once, at offset", ack.Offset, "(resent and already stored:", ack.Duplicate, ")")

	// Retrying a Message by hand is safe when it carries its own producer and sequence.
	m := client.Message{Topic: "orders.eu.created", ProducerID: "billing-7", Sequence: 42, Payload: []byte(`{"id":2}`)}
	ack, err = c.Publish(ctx, m)
	if errors.Is(err, client.ErrOutcomeUnknown) {
		ack, err = c.Publish(ctx, m) // a duplicate if the first attempt was stored
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("order 2 at offset", ack.Offset)
}
