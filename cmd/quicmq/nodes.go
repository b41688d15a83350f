package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"text/tabwriter"
	"time"

	"github.com/quicmq/quicmq/node/manage"
)

func init() {
	register("nodes", "list the region's nodes with their raft roles and leaderships; drain NAME or undrain NAME before and after maintenance; remove NAME to shrink the region", runNodes)
}

const nodesSynopsis = `[ls | drain NAME [--no-wait] | undrain NAME [--no-wait] | remove NAME [--dead] [--no-wait]] [--admin HOST:PORT] [--format table|json]

  ls (the default)  every node of the region with replicated topics: its role in the region's
                    metadata group, its state (up, down, draining, removing), the raft groups it
                    holds and leads, and the replica moves in progress that involve it
  drain NAME        NAME hands every leadership (the metadata group's and every data group's) to
                    other replicas and takes none until undrained; it keeps its replicas. Refused,
                    with the reason, when some group has no other replica up and undrained.
                    Waits until NAME leads nothing, showing progress (--no-wait: returns at once).
  undrain NAME      NAME may lead again; the leader balancer gives it its share over time.
  remove NAME       NAME's replicas move to the up nodes holding the fewest groups, a couple of
                    groups at a time (each new replica a learner until caught up, then promoted
                    while NAME's is removed, in one raft change), then NAME leaves the metadata
                    group and is no longer listed; stop its process then. Refused, with the
                    reason, when the region would keep fewer nodes than --replicas, or when NAME
                    is down. Waits until done, showing the moves (--no-wait: returns at once).
  remove --dead NAME  for a node that will not come back: its groups are re-replicated from
                    the other replicas. Refused when NAME is up.
drain, undrain and remove change the region's state: the node asked must run with --admin-api.`

func runNodes(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "nodes", nodesSynopsis)
	admin := fs.String("admin", "127.0.0.1:9400", adminFlagDoc)
	format := fs.String("format", "table", "output: table, or json: one JSON array of objects with the fields name, role (voter or learner;\n"+
		"none while outside the metadata group), state (up, down, draining or removing), held (raft groups\n"+
		"it holds a replica of), led (groups it leads), meta_leader (it leads the metadata group), moves\n"+
		"(array of moves in progress involving it: group, from, to, state, entries, of, bytes), local (the node asked)")
	timeout := fs.Duration("timeout", 2*time.Minute, "how long to wait: for the node's answer, and for a drain to complete")
	noWait := fs.Bool("no-wait", false, "drain, undrain, remove: return once the region has taken the request")
	dead := fs.Bool("dead", false, "remove: the node will not come back (it is down): re-replicate its groups from the other replicas")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	op, name := "ls", ""
	switch {
	case len(pos) == 0:
	case pos[0] == "ls" || pos[0] == "list":
		if len(pos) > 1 {
			return usageError("ls takes no argument, got %q", pos[1])
		}
	case pos[0] == "drain" || pos[0] == "undrain" || pos[0] == "remove":
		if len(pos) != 2 || pos[1] == "" {
			return usageError("%s takes one node name, got %d arguments", pos[0], len(pos)-1)
		}
		op, name = pos[0], pos[1]
	default:
		return usageError("unknown operation %q: want ls, drain NAME, undrain NAME or remove NAME", pos[0])
	}
	if err := checkTableFormat(*format); err != nil {
		return err
	}
	if err := checkOpFlags(fs, op, map[string][]string{"no-wait": {"drain", "undrain", "remove"}, "dead": {"remove"}}); err != nil {
		return err
	}
	if *timeout <= 0 {
		return usageError("--timeout %v: want a positive duration", *timeout)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if op == "ls" {
		var ns []manage.NodeInfo
		if err := adminCall(ctx, http.MethodGet, *admin, "/v1/nodes", &ns); err != nil {
			return err
		}
		return printNodes(e, ns, *format == "json")
	}
	var ni manage.NodeInfo
	path := "/v1/nodes/" + url.PathEscape(name) + "/" + op
	if *dead {
		path += "?dead=1"
	}
	if err := adminCall(ctx, http.MethodPost, *admin, path, &ni); err != nil {
		return err
	}
	if *noWait {
		fmt.Fprintf(e.stderr, "%s requested: %s\n", op, ni)
		return printNodes(e, []manage.NodeInfo{ni}, *format == "json")
	}
	return waitNodeOp(ctx, e, *admin, op, name, *format == "json", *timeout)
}

// waitNodeOp waits until the metadata shows op on node name done, printing each change of
// its line: for a drain, name leads nothing; for a remove, name is no longer listed.
func waitNodeOp(ctx context.Context, e *env, admin, op, name string, asJSON bool, timeout time.Duration) error {
	poll := time.NewTicker(250 * time.Millisecond)
	defer poll.Stop()
	last := ""
	for {
		var ns []manage.NodeInfo
		if err := adminCall(ctx, http.MethodGet, admin, "/v1/nodes", &ns); err != nil {
			return err
		}
		listed := false
		for _, n := range ns {
			if n.Name != name {
				continue
			}
			listed = true
			if line := n.String(); line != last {
				fmt.Fprintln(e.stderr, line)
				last = line
			}
			done := n.State != "draining"
			switch op {
			case "remove":
				done = false // until it is no longer listed
			case "drain":
				done = n.State == "draining" && n.Led == 0 && !n.MetaLeader
			}
			if done {
				return printNodes(e, ns, asJSON)
			}
		}
		if op == "remove" && !listed {
			fmt.Fprintf(e.stderr, "%s removed: it holds no replica and left the region's metadata group; stop its process\n", name)
			return printNodes(e, ns, asJSON)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s %s: not done within --timeout %v (last seen: %s); the request stands: 'quicmq nodes' shows its progress",
				op, name, timeout, cmpOrDash(last))
		case <-poll.C:
		}
	}
}

func cmpOrDash(s string) string {
	if s == "" {
		return "nothing"
	}
	return s
}

func printNodes(e *env, ns []manage.NodeInfo, asJSON bool) error {
	if asJSON {
		for i := range ns {
			if ns[i].Moves == nil {
				ns[i].Moves = []manage.MoveInfo{}
			}
		}
		return writeJSON(e, ns)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tROLE\tSTATE\tHELD\tLED\tMOVES")
	for _, n := range ns {
		name, role := n.Name, n.Role
		if n.Local {
			name += " (this node)"
		}
		if n.MetaLeader {
			role += " (metadata leader)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\n", name, role, n.State, n.Held, n.Led, len(n.Moves))
	}
	return tw.Flush()
}
