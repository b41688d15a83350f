// Package client is the Go SDK for QuicMQ: applications import it to publish records to a
// node and to subscribe to topic patterns, over one QUIC connection per [Conn].
//
// # Quick start
//
// With `quicmq dev` running (it prints its nodes' addresses and the CA it wrote, e.g.
// /tmp/quicmq-dev-XXXX/ca/ca.pem, or DIR/ca/ca.pem with --data DIR), dial a node, publish,
// then read the topic back and acknowledge each record:
//
//	ctx := context.Background()
//	conn, err := client.Dial(ctx, client.Options{CAFile: "/tmp/quicmq-dev-XXXX/ca/ca.pem"}, "127.0.0.1:7400")
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer conn.Close()
//	ack, err := conn.Publish(ctx, client.Message{Topic: "demo.hello", Payload: []byte("hi")})
//	if err != nil {
//		log.Fatal(err)
//	}
//	fmt.Println("stored at offset", ack.Offset)
//	sub, err := conn.Subscribe(ctx, "demo.>", client.SubscribeOptions{Durable: "quickstart"})
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer sub.Close()
//	for rec, err := range sub.Records(ctx) {
//		if err != nil {
//			log.Fatal(err) // or skip a *client.GapError: records retention deleted
//		}
//		fmt.Printf("%s@%d: %s\n", rec.Topic, rec.Offset, rec.Payload)
//		if err := sub.Ack(rec); err != nil { // a durable consumer resumes after its last ack
//			log.Fatal(err)
//		}
//	}
//
// The same program is the package's Example. [Conn.Flush] waits for every publish issued so
// far; errors read as one sentence ("client: publish to "a..b": invalid topic: empty token at
// byte 2") and carry the node's [Code] in an [*Error].
//
// # What it owns
//
// It owns the client side of the protocol in docs/protocol.md and nothing else; it depends
// only on internal/wire (the frame codec shared with the node), quic-go and the standard
// library, so that applications pull in no broker code.
//
// The protocol's shape shows through the API on purpose:
//   - [Dial] opens the connection and its control stream (HELLO, then WELCOME or an error).
//   - Publishes share one publish stream per Conn and are pipelined: [Conn.PublishAsync]
//     returns a [Future] at once and blocks only while MaxPendingPublishes are unanswered;
//     [Conn.Publish] waits for the durable acknowledgement. Acks come back in send order.
//   - Every [Conn.Subscribe] opens its own QUIC stream (one stream per subscription), so a
//     slow or lossy subscription never stalls another one. [Subscription.Next] reads straight
//     from that stream: there is no goroutine and no queue per subscription, only a read
//     buffer (32 KiB, or one larger frame), so a consumer that stops reading stops its stream
//     through QUIC flow control and costs the node a cursor, not memory.
//   - Errors that come from the node are [*Error] values carrying a [Code]; retention gaps are
//     reported once as [*GapError] (a durable acknowledges one with [Subscription.AckGap] to
//     store a position past it); a closed Conn fails with [ErrClosed].
//   - A lost connection fails what was under way on it. With Options.Reconnect the next
//     operation dials the node again (within its context), and each open subscription is
//     made again by its next Next, from where it was, delivering nothing twice. Given
//     several nodes of one region (Dial(ctx, opts, "host:port", "host:port")), [Dial] takes
//     the first that answers and a reconnect starts with the next, so the Conn outlives any
//     one node; an address where nothing listens is skipped at once. A node that shuts down
//     says so first (ERROR 11, or a publish stream it stops reading): with several
//     addresses the next stream already goes to a new connection with another node, while
//     the old one answers what it took until the node closes it.
//   - With Options.Idempotent the Conn numbers its publishes (a random producer ID and one
//     increasing sequence), and the node stores each (topic, producer, sequence) once: with
//     Reconnect too, publishes in flight on a lost connection (or on a stream the node ended
//     saying their outcome is unknown) are resent in order on the next one, and those already
//     stored come back with [Ack].Duplicate and their original offset.
//     Publishes cut off without Reconnect fail with an [*OutcomeUnknownError].
//   - The Conn owns its UDP socket and quic.Transport, and moves its connection to a new one by
//     QUIC connection migration ([Conn.Migrate]): a path on a new socket is probed and the
//     connection switches to it, keeping every stream and the TLS session (no handshake). It
//     does so on its own when the local address of the route to the node changes (checked
//     every Options.MigrateCheck, 5 s); such a migration whose new path goes unanswered is
//     tried again three times, after 1, 2 and 4 Options.MigrateTimeout. A migration that is
//     refused leaves the connection as
//     it was, or with Options.Reconnect makes the Conn reconnect instead; [Conn.Stats] counts
//     handshakes, migrations, failures and fallbacks. Every socket a connection used stays
//     open until it ends (quic-go ends a connection with its first socket).
//   - Every record carries its origin region and origin offset, so a subscription's
//     [Subscription.Position] is a [Position]: per topic, per origin region, the last origin
//     offset delivered (for a durable consumer: acknowledged). It means the same in every
//     region: SubscribeOptions.Position resumes exactly after one, on a node of any region.
//     With Options.Failover (nodes of other regions) and Reconnect, a Conn whose home region
//     has no node left moves there, and each subscription resumes with its position: nothing
//     delivered twice, nothing skipped, each origin in order (records of the lost region not
//     mirrored yet arrive when it returns). Publishes there are that region's records, and
//     de-duplication is per region (failover.go). [Conn.Stats] counts the moves. A group
//     member moves too: the group resumes there from its state mirrored from the lost region,
//     and the member drops (acknowledging it) a redelivery of a record it acknowledged before,
//     counted by [Subscription.Redelivered]: exactly once for a group of one member, at least
//     once within the mirroring lag for several (groupmove.go).
//
// Goroutines: a Conn runs one goroutine reading the control stream, one watching the route to
// its node (unless Options.MigrateCheck is negative), and, once something was
// published, two for the publish stream (a writer that batches frames, a reader that matches
// acks to futures), and, while publishes are being resent after a lost connection, the
// resender, which dials and hands them to a new publish stream. All of them belong to the Conn
// and have exited when [Conn.Close] returns.
// Subscriptions and topic listings run on the caller's goroutine.
package client
