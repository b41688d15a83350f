package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/quicmq/quicmq/node"
)

// subDurable reads count records as durable name with the CLI (acking each after printing).
func subDurable(t *testing.T, n *cliNode, pattern, name string, count string) {
	t.Helper()
	code, _, stderr := runCLI(t, "", append([]string{"sub", "--topic", pattern, "--durable", name, "--count", count}, n.conn()...)...)
	if code != 0 {
		t.Fatalf("sub: exit %d:\n%s", code, stderr)
	}
}

// TestConsumersCLI: ls (table and json), info, reset and rm through the CLI, with the
// refusals and plurals a user sees.
func TestConsumersCLI(t *testing.T) {
	n := startCLINode(t)
	publishLines(t, n, "shop.orders", "o1", "o2", "o3")
	subDurable(t, n, "shop.>", "billing", "1")

	code, stdout, stderr := runCLI(t, "", append([]string{"consumers"}, n.conn()...)...)
	rows := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if code != 0 || len(rows) != 2 || strings.Join(strings.Fields(rows[0]), " ") != "NAME KIND PATTERN PENDING MEMBERS LAST ACK" {
		t.Fatalf("consumers: exit %d:\n%s\n%s", code, stdout, stderr)
	}
	if f := strings.Fields(rows[1]); len(f) != 6 || strings.Join(f[:5], " ") != "billing durable - 2 0" || !strings.HasPrefix(f[5], "20") {
		t.Fatalf("row %q: want billing, durable, no pattern (no member), 2 pending, 0 members, a time", rows[1])
	}

	code, stdout, stderr = runCLI(t, "", append([]string{"consumers", "ls", "--format", "json"}, n.conn()...)...)
	var c jsonConsumer
	if code != 0 || json.Unmarshal([]byte(stdout), &c) != nil || c.Name != "billing" || c.Kind != "durable" || c.Pending != 2 || c.LastAck == nil {
		t.Fatalf("ls --format json: exit %d: %q %s", code, stdout, stderr)
	}
	var raw map[string]any
	json.Unmarshal([]byte(stdout), &raw)
	for _, k := range []string{"name", "kind", "pattern", "pending", "members", "last_ack"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("json lacks %q: %s", k, stdout)
		}
	}

	code, stdout, stderr = runCLI(t, "", append([]string{"consumers", "info", "billing"}, n.conn()...)...)
	if code != 0 || !strings.Contains(stdout, "consumer billing (durable): 2 records pending, 0 members connected") ||
		!strings.Contains(stdout, "shop.orders") {
		t.Fatalf("info: exit %d:\n%s\n%s", code, stdout, stderr)
	}

	code, _, stderr = runCLI(t, "", append([]string{"consumers", "reset", "billing"}, n.conn()...)...)
	if code != 2 || !strings.Contains(stderr, "--to is required") {
		t.Fatalf("reset without --to: exit %d: %s", code, stderr)
	}
	code, _, stderr = runCLI(t, "", append([]string{"consumers", "reset", "billing", "--to", "soon"}, n.conn()...)...)
	if code != 2 || !strings.Contains(stderr, `--to "soon"`) {
		t.Fatalf("reset --to soon: exit %d: %s", code, stderr)
	}
	code, stdout, stderr = runCLI(t, "", append([]string{"consumers", "reset", "billing", "--to", "earliest", "--format", "json"}, n.conn()...)...)
	if code != 0 || json.Unmarshal([]byte(stdout), &c) != nil || c.Pending != 3 || len(c.Topics) != 1 || c.Topics[0].Resume != 0 ||
		!strings.Contains(stderr, "reset to earliest on 1 topic: 3 records pending") {
		t.Fatalf("reset: exit %d: %q %s", code, stdout, stderr)
	}
	code, _, stderr = runCLI(t, "", append([]string{"consumers", "ls", "--force"}, n.conn()...)...)
	if code != 2 || !strings.Contains(stderr, "--force applies to reset and rm only") {
		t.Fatalf("ls --force: exit %d: %s", code, stderr)
	}
	code, _, stderr = runCLI(t, "", append([]string{"consumers", "rm", "billing"}, n.conn()...)...)
	if code != 0 || !strings.Contains(stderr, "consumer billing removed (1 position)") {
		t.Fatalf("rm: exit %d: %s", code, stderr)
	}
	code, _, stderr = runCLI(t, "", append([]string{"consumers", "info", "billing"}, n.conn()...)...)
	if code != 1 || !strings.Contains(stderr, `no consumer "billing"`) {
		t.Fatalf("info after rm: exit %d: %s", code, stderr)
	}
	code, stdout, _ = runCLI(t, "", "consumers", "-h")
	if code != 0 || !strings.Contains(stdout, "reset NAME --to") || !strings.Contains(stdout, "--force") {
		t.Fatalf("consumers -h: exit %d:\n%s", code, stdout)
	}
}

// TestTopicsCreatePurgeDeleteCLI: create with retention (shown by topics), purge and delete
// refused without --yes saying what would go, refused with a dependent unless --force.
func TestTopicsCreatePurgeDeleteCLI(t *testing.T) {
	n := startCLINode(t, func(c *node.Config) {})
	code, stdout, stderr := runCLI(t, "", append([]string{"topics", "create", "logs.app", "--retention-age", "24h"}, n.conn()...)...)
	if code != 0 || !strings.Contains(stdout, "age=24h0m0s") {
		t.Fatalf("create: exit %d:\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "", append([]string{"topics", "--format", "json"}, n.conn()...)...)
	var jt jsonTopic
	if code != 0 || json.Unmarshal([]byte(stdout), &jt) != nil || jt.RetentionAge == nil || *jt.RetentionAge != "24h0m0s" ||
		jt.RetentionBytes == nil || *jt.RetentionBytes != 0 {
		t.Fatalf("topics json: exit %d: %q %s", code, stdout, stderr)
	}
	publishLines(t, n, "logs.app", "l1", "l2")
	code, _, stderr = runCLI(t, "", append([]string{"topics", "purge", "logs.app"}, n.conn()...)...)
	if code != 2 || !strings.Contains(stderr, "it holds 2 records") || !strings.Contains(stderr, "--yes") {
		t.Fatalf("purge without --yes: exit %d: %s", code, stderr)
	}
	subDurable(t, n, "logs.app", "archiver", "1")
	code, _, stderr = runCLI(t, "", append([]string{"topics", "delete", "logs.app", "--yes"}, n.conn()...)...)
	if code != 1 || !strings.Contains(stderr, `durable consumer "archiver"`) || !strings.Contains(stderr, "--force") {
		t.Fatalf("delete with a dependent: exit %d: %s", code, stderr)
	}
	code, _, stderr = runCLI(t, "", append([]string{"topics", "purge", "logs.app", "--yes", "--force"}, n.conn()...)...)
	if code != 0 || !strings.Contains(stderr, "topic logs.app purged: 2 records deleted") {
		t.Fatalf("purge: exit %d: %s", code, stderr)
	}
	code, _, stderr = runCLI(t, "", append([]string{"topics", "delete", "logs.app", "--yes", "--force"}, n.conn()...)...)
	if code != 0 || !strings.Contains(stderr, "topic logs.app deleted: 0 records deleted") {
		t.Fatalf("delete: exit %d: %s", code, stderr)
	}
	code, stdout, stderr = runCLI(t, "", append([]string{"topics"}, n.conn()...)...)
	if code != 0 || strings.Contains(stdout, "logs.app") {
		t.Fatalf("topics after delete: %s %s", stdout, stderr)
	}
}

// TestConsumersCLIGroup: a group is a row of kind group, and info --format json shows its
// settings, outstanding records and per-topic floor.
func TestConsumersCLIGroup(t *testing.T) {
	n := startCLINode(t)
	publishLines(t, n, "shop.orders", "o1", "o2", "o3")
	code, _, stderr := runCLI(t, "", append([]string{"sub", "--topic", "shop.>", "--group", "workers", "--max-deliver", "4", "--count", "2"}, n.conn()...)...)
	if code != 0 {
		t.Fatalf("sub --group: exit %d:\n%s", code, stderr)
	}
	code, stdout, stderr := runCLI(t, "", append([]string{"consumers"}, n.conn()...)...)
	rows := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if f := strings.Fields(rows[len(rows)-1]); code != 0 || len(f) != 6 || strings.Join(f[:5], " ") != "workers group shop.> 1 0" {
		t.Fatalf("consumers: exit %d:\n%s\n%s; want a row workers, group, shop.>, 1 pending, 0 members", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "", append([]string{"consumers", "info", "workers", "--format", "json"}, n.conn()...)...)
	var raw map[string]any
	if code != 0 || json.Unmarshal([]byte(stdout), &raw) != nil {
		t.Fatalf("info --format json: exit %d: %q %s", code, stdout, stderr)
	}
	if raw["kind"] != "group" || raw["max_deliver"] != 4.0 || raw["order"] != "none" || raw["ack_wait"] != "30s" || raw["outstanding"] != 1.0 {
		t.Fatalf("group fields: %s", stdout)
	}
	topics, _ := raw["topics"].([]any)
	// The third record reached the member before it exited (it reads ahead): outstanding.
	if len(topics) != 1 || topics[0].(map[string]any)["floor"] != 2.0 || topics[0].(map[string]any)["outstanding"] != 1.0 {
		t.Fatalf("group topic rows: %s; want floor 2, one outstanding", stdout)
	}
	code, stdout, _ = runCLI(t, "", append([]string{"consumers", "info", "workers"}, n.conn()...)...)
	if code != 0 || !strings.Contains(stdout, "consumer workers (group)") || !strings.Contains(stdout, "max-deliver 4") || !strings.Contains(stdout, "FLOOR") {
		t.Fatalf("info: %s", stdout)
	}
}
