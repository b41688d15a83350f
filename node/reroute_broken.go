//go:build quicmq_broken_reroute

package node

// rerouteUnordered, in the build tagged quicmq_broken_reroute, lets a stream's batch of a
// topic be dispatched while earlier batches of the topic are in flight elsewhere, and a
// rerouted batch go even when a later one was appended meanwhile (publishorder.go): a
// publish a leadership move refused is then appended after publishes read after it. Only
// for showing that TestDrainUnderPipelinedPublishingRefusesNothing fails without the order.
const rerouteUnordered = true
