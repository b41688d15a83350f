package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/quicmq/quicmq/client"
)

func TestTopicsTable(t *testing.T) {
	n := startCLINode(t)
	publishLines(t, n, "shop.orders", "o1", "o2", "o3")
	publishLines(t, n, "shop.carts", "c1")
	publishLines(t, n, "billing", "b1", "b2")

	code, stdout, stderr := runCLI(t, "", append([]string{"topics"}, n.conn()...)...)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	rows := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(rows) != 4 || strings.Join(strings.Fields(rows[0]), " ") != "TOPIC FIRST NEXT RECORDS BYTES RETENTION LEADER REPLICAS" {
		t.Fatalf("table:\n%s", stdout)
	}
	want := []string{"billing 0 2 2", "shop.carts 0 1 1", "shop.orders 0 3 3"}
	for i, w := range want {
		f := strings.Fields(rows[i+1])
		if len(f) != 9 || strings.Join(f[:4], " ") != w || f[5] != "B" && f[5] != "KiB" || f[6] != "default" || f[7] != f[8] {
			t.Errorf("row %d = %q, want %q and a size", i+1, rows[i+1], w)
		}
	}

	code, stdout, stderr = runCLI(t, "", append([]string{"topics", "--pattern", "shop.*"}, n.conn()...)...)
	if code != 0 || strings.Count(stdout, "\n") != 3 || strings.Contains(stdout, "billing") {
		t.Fatalf("--pattern shop.*: exit %d:\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "", append([]string{"topics", "--pattern", "none.>"}, n.conn()...)...)
	if code != 0 || strings.Count(stdout, "\n") != 1 || !strings.Contains(stderr, `no topic matches "none.>"`) {
		t.Fatalf("no match: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestTopicsJSON(t *testing.T) {
	n := startCLINode(t)
	publishLines(t, n, "j.a", "1", "2")
	publishLines(t, n, "j.b", "3")
	code, stdout, stderr := runCLI(t, "", append([]string{"topics", "--format", "json"}, n.conn()...)...)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	var got []jsonTopic
	for _, l := range strings.Split(strings.TrimSuffix(stdout, "\n"), "\n") {
		var jt jsonTopic
		if err := json.Unmarshal([]byte(l), &jt); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		got = append(got, jt)
	}
	if len(got) != 2 || got[0].Topic != "j.a" || got[0].Records != 2 || got[0].Next != 2 || got[0].Bytes == 0 ||
		got[1].Topic != "j.b" || got[1].Records != 1 {
		t.Fatalf("topics: %+v", got)
	}
	// A single-copy topic names its one holder as leader and replica.
	if got[0].Leader == "" || len(got[0].Replicas) != 1 || got[0].Replicas[0] != got[0].Leader || !strings.Contains(stdout, `"leader":`) {
		t.Fatalf("leader and replicas of an R1 topic: %+v\n%s", got[0], stdout)
	}
	if code, _, stderr := runCLI(t, "", append([]string{"topics", "--format", "xml"}, n.conn()...)...); code == 0 || !strings.Contains(stderr, `--format "xml"`) {
		t.Fatalf("--format xml: exit %d:\n%s", code, stderr)
	}
}

// The table streams: a short one is exactly what text/tabwriter makes of the whole table,
// and a long one keeps the columns its first rows sized, a wider cell later widening its
// column from its row on.
func TestTopicsTableStreams(t *testing.T) {
	rows := func(n int, wide int) []client.TopicInfo {
		var out []client.TopicInfo
		for i := range n {
			name := fmt.Sprintf("t.%06d", i)
			if i == wide {
				name = "t.a-much-longer-name-than-the-others"
			}
			out = append(out, client.TopicInfo{Name: name, First: 1, Next: uint64(i + 10), Bytes: uint64(i * 100), Leader: "n1", Replicas: []string{"n1", "n2"}})
		}
		return out
	}
	tabwritten := func(list []client.TopicInfo) string {
		var b bytes.Buffer
		tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "TOPIC\tFIRST\tNEXT\tRECORDS\tBYTES\tRETENTION\tLEADER\tREPLICAS")
		for _, t := range list {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", t.Name, t.First, t.Next, t.Records(), humanBytes(t.Bytes), retentionCell(t.Retention), t.Leader, strings.Join(t.Replicas, ","))
		}
		tw.Flush()
		return b.String()
	}
	for _, n := range []int{0, 3, topicTableBlock - 1, topicTableBlock} {
		var b bytes.Buffer
		printTopics(&env{stdout: &b}, rows(n, 1))
		if got, want := b.String(), tabwritten(rows(n, 1)); got != want {
			t.Fatalf("%d rows: the streamed table differs from tabwriter's:\n%.400s\nwant\n%.400s", n, got, want)
		}
	}
	var b bytes.Buffer
	list := rows(topicTableBlock+50, topicTableBlock+10)
	printTopics(&env{stdout: &b}, list)
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != len(list)+1 {
		t.Fatalf("%d lines, want %d", len(lines), len(list)+1)
	}
	col := func(line string) int { return strings.Index(line, "FIRST") }
	for i, line := range lines[1:] {
		at := strings.Index(line, "  1  ") + 2 // FIRST is 1 in every row
		want := col(lines[0])
		if i >= topicTableBlock+10 {
			want = len("t.a-much-longer-name-than-the-others") + 2
		}
		if at != want {
			t.Fatalf("row %d: FIRST at column %d, want %d:\n%s\n%s", i, at, want, lines[0], line)
		}
	}
}
