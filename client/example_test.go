package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/quicmq/quicmq/client"
)

// The examples expect a node on 127.0.0.1:7400 whose CA is in ./data/tls/ca.pem, such as
// the one 'quicmq dev' starts (it prints the CA's path). They are compiled, not run.

func ExampleDial() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{CAFile: "data/tls/ca.pem"}, "127.0.0.1:7400")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	name, region := c.Node()
	fmt.Println("connected to", name, "in", region)
}

func ExampleConn_Publish() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Options{CAFile: "data/tls/ca.pem"}, "127.0.0.1:7400")
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
	c, err := client.Dial(ctx, client.Options{CAFile: "data/tls/ca.pem", MaxPendingPublishes: 512}, "127.0.0.1:7400")
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
	c, err := client.Dial(ctx, client.Options{CAFile: "data/tls/ca.pem"}, "127.0.0.1:7400")
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
	c, err := client.Dial(ctx, client.Options{CAFile: "data/tls/ca.pem"}, "127.0.0.1:7400")
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
	c, err := client.Dial(ctx, client.Options{CAFile: "data/tls/ca.pem"}, "127.0.0.1:7400")
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
	c, err := client.Dial(ctx, client.Options{CAFile: "data/tls/ca.pem"}, "127.0.0.1:7400")
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
	c, err := client.Dial(ctx, client.Options{CAFile: "data/tls/ca.pem", Reconnect: true, Idempotent: true}, "127.0.0.1:7400")
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
