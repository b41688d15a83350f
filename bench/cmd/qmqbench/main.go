// Command qmqbench runs QuicMQ's side-by-side scenarios against NATS over lossy networks
// (issue 4; docs/benchmarks.md). Each scenario is one command; progress goes to stderr,
// JSON results and PNG plots to --out (default the tree's bench/results, from wherever in it qmqbench runs).
//
//	qmqbench fanout  scenario 1: 1 publisher, 100 subscriptions on one connection, loss rates
//	                 (quicmq, ablation, nats, jetstream; --delay adds a round trip, QuicMQ only)
//	qmqbench slow    scenario 2: the same without loss, one subscription stops reading
//	qmqbench publish scenario 3: durable publish rate, QuicMQ against JetStream with and
//	                 without an fsync per write (--publishers 1,16); the node process's CPU
//	                 per record beside a raw Pebble writer's ("rawpebble") and a bare QUIC
//	                 sink's ("quicsink") in the same run
//	qmqbench replay  scenario 4: read stored records from offset 0 (--records 1000000)
//	qmqbench setup   scenario 5: new subscriptions/s on one connection, against a
//	                 TLS-over-TCP connection per subscription (and NATS SUB for context)
//	qmqbench cross   scenario 6: two regions, loss on the link, a stream per mirrored topic
//	                 against the federation's shared-link ablation
//	qmqbench truefanout  one topic, S subscriptions over C connections, a rising publish
//	                 rate: deliveries/s held with p99 < 50 ms and CPU per delivery, QuicMQ
//	                 against NATS core and JetStream ("tfworker")
//	qmqbench hetero  one topic over 100 connections, one behind loss and a round trip: the
//	                 clean ones' p99 against a run without it, QuicMQ and NATS ("hetworker")
//	qmqbench replicated  durable publish into one topic, 1 and 16 clients: QuicMQ R3 (three
//	                 'quicmq node --replicas 3' processes) against R1 and JetStream R3
//	                 ("repworker", "jsnode")
//	qmqbench groups  a consumer group of 1, 4 and 16 members over one topic with a backlog
//	                 and a live publisher, acks stored durably, against JetStream pull
//	                 consumers; and a member that stops reading ("grpworker")
//	qmqbench report  tables and plots again from a fanout, slow or truefanout JSON file
//	qmqbench qlog    a connection's congestion window, losses and sending rate from a qlog
//	                 trace (QLOGDIR=DIR on a node, a link or the SDK)
//	qmqbench quicshare  a node's CPU profile by class, quic-go's part split by what it did
//	                 (crypto, acks, UDP send and receive, packing ...), cpu-µs a record
//
// Every run starts a fresh network namespace (bench/lossy), a worker process inside it
// (this binary's hidden "worker", "durworker", "tfworker", "hetworker" or "setup worker" command) and the broker as
// the worker's child ("broker" or "setup broker"), so loss applies to every packet between
// clients and broker and nothing else shares the namespace. A cross run instead joins two
// namespaces with a veth pair and runs a quicmq node in each, with its publisher,
// subscriber and relay as hidden commands ("crosspub", "crosssub", "crossrelay").
// fanout and hetero also run beside N idle mirrored topics of a second region's node
// (--idle-mirrored 0,N, idlemirror.go: issue 34's figure 3), in a namespace of its own.
// It needs root and nftables; without them it says so and exits.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "fanout":
		err = runFanout(os.Args[2:], false)
	case "slow":
		err = runFanout(os.Args[2:], true)
	case "publish":
		err = runDurable(os.Args[2:], "publish")
	case "replay":
		err = runDurable(os.Args[2:], "replay")
	case "setup":
		err = runSetup(os.Args[2:])
	case "cross", "crosspub", "crosssub", "crossrelay":
		err = runCrossCommand(os.Args[1], os.Args[2:])
	case "report":
		err = runReport(os.Args[2:])
	case "qlog":
		err = runQlog(os.Args[2:])
	case "quicshare":
		err = runQUICShare(os.Args[2:])
	case "worker":
		err = runWorker(os.Args[2:])
	case "durworker":
		err = runDurWorker(os.Args[2:])
	case "rawpebble":
		err = runRawPebble(os.Args[2:])
	case "quicsink":
		err = runQUICSink(os.Args[2:])
	case "truefanout":
		err = runTrueFanout(os.Args[2:])
	case "tfworker":
		err = runTFWorker(os.Args[2:])
	case "hetero":
		err = runHetero(os.Args[2:])
	case "hetworker":
		err = runHetWorker(os.Args[2:])
	case "replicated":
		err = runReplicated(os.Args[2:])
	case "repworker":
		err = runRepWorker(os.Args[2:])
	case "jsnode":
		err = runJSNode(os.Args[2:])
	case "groups":
		err = runGroups(os.Args[2:])
	case "grpworker":
		err = runGrpWorker(os.Args[2:])
	case "broker":
		err = runBroker(os.Args[2:])
	case "topics":
		err = runTopics(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "qmqbench %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintf(os.Stderr, `usage: qmqbench COMMAND [flags]

  fanout   scenario 1: 1 publisher, N subscriptions on one connection, packet loss rates
  slow     scenario 2: the same without loss, one subscription stops reading
  publish  scenario 3: durable publish throughput, QuicMQ against JetStream
  replay   scenario 4: replay of stored records from offset 0, QuicMQ against JetStream
  setup    scenario 5: new subscriptions/s on one connection, against a TLS-over-TCP connection each
  cross    scenario 6: two regions, loss on the link, a stream per mirrored topic vs one shared
  truefanout  one topic, S subscriptions over C connections, rising rate: deliveries/s held, CPU/delivery
  hetero   one topic over 100 connections, one behind loss and a round trip: the clean ones' p99
  replicated  durable publish into one topic: QuicMQ R3 against R1 and JetStream R3, 1 and 16 clients
  groups   a consumer group of 1, 4, 16 members, per-record acks stored durably, against JetStream
           pull consumers; a member that stops reading, against the group without it
  report   tables and plots again from a fanout, slow or truefanout JSON file
  qlog     plot a QUIC connection's congestion window and losses from a qlog trace (QLOGDIR)
  quicshare  a node's CPU profile by class, quic-go's part by what it did, cpu-µs a record
  topics   create N topics at a node by one publish each (what idle mirrored topics cost, by hand)

Run "qmqbench COMMAND -h" for the flags. Needs root and nftables (apt-get install -y nftables).
`)
	os.Exit(2)
}
