package main

import (
	"flag"
	"time"

	"github.com/quicmq/quicmq/client"
)

// groupFlags are sub's consumer group flags.
type groupFlags struct {
	name       *string
	ackWait    *time.Duration
	maxDeliver *int
	deadLetter *string
	order      *string
}

func (g *groupFlags) register(fs *flag.FlagSet) {
	g.name = fs.String("group", "", "join the shared consumer group NAME: its members split the records, each record to one member;\n"+
		"each record is acknowledged after it is printed (the first member's settings make the group)")
	g.ackWait = fs.Duration("ack-wait", 0, "with --group: redeliver a record not acknowledged within this long, e.g. 30s (0: the group's; node default 30s)")
	g.maxDeliver = fs.Int("max-deliver", 0, "with --group: deliveries before a record goes to the dead-letter topic (0: the group's; node default 5)")
	g.deadLetter = fs.String("dead-letter", "", "with --group: topic for records that reached --max-deliver, with headers saying why and from where\n"+
		"(empty: such records are dropped)")
	g.order = fs.String("order", "none", "with --group: none, topic (one member at a time per topic, in order) or key (per value of the 'key' header)")
}

// apply checks the flags and sets them in opts.
func (g *groupFlags) apply(opts *client.SubscribeOptions) error {
	var order client.Order
	switch *g.order {
	case "none", "":
	case "topic":
		order = client.OrderByTopic
	case "key":
		order = client.OrderByKey
	default:
		return usageError("--order %q: want none, topic or key", *g.order)
	}
	if *g.name == "" {
		if *g.ackWait != 0 || *g.maxDeliver != 0 || *g.deadLetter != "" || order != client.OrderNone {
			return usageError("--ack-wait, --max-deliver, --dead-letter and --order are settings of a group: give --group NAME")
		}
		return nil
	}
	switch {
	case opts.Durable != "":
		return usageError("--group and --durable exclude each other: a group is itself the named position")
	case *g.ackWait < 0 || *g.ackWait%time.Millisecond != 0:
		return usageError("--ack-wait %v: want a positive whole number of milliseconds, e.g. 30s", *g.ackWait)
	case *g.maxDeliver < 0:
		return usageError("--max-deliver must not be negative, got %d", *g.maxDeliver)
	}
	opts.Group, opts.AckWait, opts.MaxDeliver, opts.DeadLetter, opts.OrderBy = *g.name, *g.ackWait, *g.maxDeliver, *g.deadLetter, order
	return nil
}
