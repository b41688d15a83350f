package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/quicmq/quicmq/client"
)

// The operations files under deploy/ (issue 6) checked against a live node.
const deployDir = "../../deploy"

var metricNameRE = regexp.MustCompile(`\bquicmq_[a-z0-9_]+`)

// dashboardExprs returns every query of the Grafana dashboard.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir, "grafana", "quicmq.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if s, ok := e.(string); ok && (k == "expr" || k == "query" || k == "definition") {
					out = append(out, s)
				}
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(doc)
	return out
}

// alertExprs returns the expr of every rule in alerts.yml (one line each, as the file keeps
// them).
func alertExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir, "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "expr:"); ok {
			e := strings.TrimSpace(rest)
			if e == "" || e == "|" || e == ">" || e == ">-" {
				t.Fatalf("alerts.yml: keep each expr on its line (this check reads them so): %q", sc.Text())
			}
			out = append(out, e)
		}
	}
	return out
}

// usedMetrics maps each quicmq_ metric the dashboard and alerts use to where it is used.
// Histogram series (_bucket, _sum, _count) count as their histogram's name.
func usedMetrics(t *testing.T) map[string]string {
	used := map[string]string{}
	add := func(where string, exprs []string) {
		if len(exprs) == 0 {
			t.Fatalf("%s: no queries found", where)
		}
		for _, e := range exprs {
			for _, m := range metricNameRE.FindAllString(e, -1) {
				used[m] = where + ": " + e
			}
		}
	}
	add("dashboard", dashboardExprs(t))
	add("alerts.yml", alertExprs(t))
	return used
}

// scrapeNames returns the metric names a /metrics page has samples for.
func scrapeNames(page string) map[string]bool {
	names := map[string]bool{}
	for _, line := range strings.Split(page, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name := line[:strings.IndexAny(line+" ", "{ ")]
		names[name] = true
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suf); ok {
				names[base] = true
			}
		}
	}
	return names
}

// TestDashboardAndAlertMetricsExist runs a two-region dev mesh with traffic (a cross-region
// subscription, so links and mirrors exist; a refused publish, so an error code exists),
// scrapes both nodes, and checks that every metric the dashboard and the alerting rules use
// is served; then runs promtool on the scrapes and the rules when it is installed (CI
// installs it and fails without it).
func TestDashboardAndAlertMetricsExist(t *testing.T) {
	d := startDev(t, "--regions", "eu,us", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0")
	stdout, stderr := d.stdout, d.stderr
	// The banner names each node's bound metrics/admin address.
	metrics := regexp.MustCompile(`metrics/admin (http://\S+)`).FindAllStringSubmatch(stdout.String(), -1)
	for _, m := range metrics {
		m[1] += "/metrics"
	}
	if len(d.nodes) != 2 || len(metrics) != 2 {
		t.Fatalf("want 2 nodes and 2 metrics endpoints:\n%s\n%s", stdout.String(), stderr.String())
	}
	dialT := func(addr string) *client.Conn { return d.dial(t, addr) }
	addrs := [][]string{{"", d.nodes[0].region, d.nodes[0].addr}, {"", d.nodes[1].region, d.nodes[1].addr}}
	sub, err := dialT(addrs[1][2]).Subscribe(context.Background(), "demo.>", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pub := dialT(addrs[0][2])
	rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer rcancel()
	if _, err := pub.Publish(rctx, client.Message{Topic: "demo.hello", Payload: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Next(rctx); err != nil {
		t.Fatalf("no cross-region record: %v\n%s", err, stderr.String())
	}
	if _, err := pub.Publish(rctx, client.Message{Topic: "demo.*", Payload: []byte("x")}); err == nil {
		t.Fatal("publish to a wildcard topic was accepted")
	}

	used := usedMetrics(t)
	served := map[string]bool{}
	var pages []string
	for _, m := range metrics {
		resp, err := http.Get(m[1])
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("scrape %s: %d %v", m[1], resp.StatusCode, err)
		}
		pages = append(pages, string(b))
		for n := range scrapeNames(string(b)) {
			served[n] = true
		}
	}
	// A replicated region serves the raft metrics (the dev mesh keeps single-copy topics).
	_, radmin := startReplicatedRegion(t)
	resp, err := http.Get("http://" + radmin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape a replicated node: %d %v", resp.StatusCode, err)
	}
	for n := range scrapeNames(string(b)) {
		served[n] = true
	}
	var missing []string
	for m, where := range used {
		if !served[m] {
			missing = append(missing, m+" (used in "+where+")")
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("metric not served by a node with traffic: %s", m)
	}
	if len(used) < 20 {
		t.Errorf("only %d metrics used by the dashboard and alerts: the check reads too little", len(used))
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool not installed (CI installs Debian's prometheus package in .ci/run)")
		}
		t.Skip("promtool not installed: apt-get install prometheus to run the promtool checks")
	}
	for i, page := range pages {
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(page)
		out, err := cmd.CombinedOutput()
		if problems := promtoolProblems(string(out)); err != nil && len(problems) > 0 || err != nil && len(out) == 0 {
			t.Errorf("promtool check metrics on %s: %v\n%s", metrics[i][1], err, strings.Join(problems, "\n"))
		}
	}
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = filepath.Join(deployDir, "prometheus")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// knownLint are promtool findings accepted on purpose (none today). Anything else promtool
// reports fails the test.
var knownLint []string

func promtoolProblems(out string) []string {
	var problems []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		known := line == ""
		for _, k := range knownLint {
			known = known || strings.Contains(line, k)
		}
		if !known {
			problems = append(problems, line)
		}
	}
	return problems
}

// The unit the boot script installs is hardened and runs the node from its config file.
func TestSystemdUnit(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(deployDir, "quicmq.service"))
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, want := range []string{
		"User=quicmq", "NoNewPrivileges=yes", "ProtectSystem=strict", "StateDirectory=quicmq",
		"LimitNOFILE=", "PrivateTmp=yes", "CapabilityBoundingSet=\n", "RestrictAddressFamilies=",
		"ExecStart=/usr/local/bin/quicmq node --config /etc/quicmq/quicmq.hcl",
		"ExecStartPre=/usr/local/bin/quicmq config check /etc/quicmq/quicmq.hcl",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("quicmq.service lacks %q", want)
		}
	}
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed")
	}
	// verify checks every directive; it wants the binary to exist, so point it at one that does.
	p := filepath.Join(t.TempDir(), "quicmq.service")
	if err := os.WriteFile(p, []byte(strings.ReplaceAll(unit, "/usr/local/bin/quicmq", "/bin/true")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(sa, "verify", p).CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
