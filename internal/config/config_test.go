package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const key32 = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=" // base64 of 32 bytes

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestGoodFile(t *testing.T) {
	tokens := writeFile(t, "tokens", "# clients\nabcdefghijklmnop-1\n\nabcdefghijklmnop-2\n")
	keyFile := writeFile(t, "gossip.key", key32+"\n")
	src := `# a full node
data      = "/var/lib/quicmq"
listen    = "0.0.0.0:7400"
advertise = "203.0.113.10:7400"
metrics   = "127.0.0.1:9400"
region    = "eu-west"
name      = "eu-1"
ca_dir    = "/etc/quicmq/ca"
admin     = "127.0.0.1:9500"
admin_api = true
cert      = "/etc/quicmq/node.pem"
key       = "/etc/quicmq/node-key.pem"
ca_bundle = "/etc/quicmq/ca-bundle.pem"
gossip    = "10.0.0.5:7946"
wan       = "10.0.0.5:7947"
gossip_advertise = "203.0.113.10:7946"
wan_advertise    = "203.0.113.10:7947"
anonymous = false
insecure_gossip = false
join      = ["10.0.0.6:7946", "10.0.0.7:7946"]
wan_join  = ["198.51.100.1:7947"]
gossip_key_file = "` + keyFile + `"
mirror    = ["orders.>", "audit.*"]
mirror_stall_after = "45s"
mirror_streams     = 512
tokens    = ["0123456789abcdef"]
token_file = "` + tokens + `"
retention_age   = "168h"
retention_bytes = 10737418240
retention_interval = "30s"
max_payload     = 1048576
max_durables_per_tenant = 5000
log_level       = "debug"
replicas        = 3
raft_no_quiesce = true
raft_no_compaction = false
raft_tick       = "50ms"
raft_groups_per_node = 4
raft_group_per_topic = false
raft_predict_placement = false
raft_balance_interval = "30s"
raft_no_balance = false
raft_stop_handoff = "5s"
raft_moves      = 3
raft_no_replica_balance = false
replace_after   = "30m"
pprof           = true
`
	f, err := Parse("node.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Settings) != len(Keys)-1 { // all but gossip_key
		t.Fatalf("got %d settings, want %d", len(f.Settings), len(Keys)-1)
	}
	want := map[string]string{
		"join": "10.0.0.6:7946,10.0.0.7:7946", "mirror": "orders.>,audit.*",
		"retention_bytes": "10737418240", "retention_age": "168h", "log_level": "debug",
		"retention_interval": "30s",
	}
	for k, v := range want {
		s, ok := f.Get(k)
		if !ok || s.Value != v {
			t.Errorf("%s = %q (set %v), want %q", k, s.Value, ok, v)
		}
	}
	if s, _ := f.Get("listen"); s.Pos.Line != 3 || s.Key.Flag != "listen" {
		t.Errorf("listen at %v", s.Pos)
	}
	if err := f.Require("data", "name"); err != nil {
		t.Error(err)
	}
}

func TestJSONForm(t *testing.T) {
	f, err := Parse("node.hcl.json", []byte(`{"data": "/d", "join": ["a:1"], "gossip": "b:2", "max_payload": 10}`))
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := f.Get("max_payload"); s.Value != "10" {
		t.Errorf("max_payload %q", s.Value)
	}
	_, err = Parse("node.json", []byte("{\n  \"data\": \"/d\",\n  \"lisen\": \"x\"\n}"))
	if err == nil || !strings.Contains(err.Error(), "node.json:3:") || !strings.Contains(err.Error(), `did you mean "listen"`) {
		t.Errorf("unknown key in JSON: %v", err)
	}
}

// TestEveryProblemAtOnce puts one bad value of each kind in a file and expects each to be
// reported at its own line, in order, in one error.
func TestEveryProblemAtOnce(t *testing.T) {
	lines := []struct{ src, want string }{
		{`data = ""`, "data: must not be empty"},
		{`listen = "7400"`, `listen: "7400": want HOST:PORT`},
		{`advertise = "host:99999"`, "port \"99999\" is not a number"},
		{`region = "eu west"`, "region: \"eu west\": want 1-64 characters"},
		{`name = 42`, "name: want a string, got number"},
		{`gossip = "10.0.0.1:7946"`, ""},
		{`join = ["10.0.0.2:7946", "nope"]`, `join[1]: "nope": want HOST:PORT`},
		{`wan_join = "a:1"`, "wan_join: want a list of strings"},
		{`gossip_key = "c2hvcnQ="`, "gossip_key: want the base64 of 32 bytes"},
		{`mirror = ["orders.>", "a..b"]`, "mirror[1]:"},
		{`tokens = ["short"]`, "tokens[0]: a token needs at least 16 characters"},
		{`token_file = "/nonexistent/tokens"`, "token_file: cannot read: /nonexistent/tokens"},
		{`retention_age = "a week"`, `retention_age: "a week": want a duration`},
		{`retention_bytes = -1`, "retention_bytes: must not be negative"},
		{`max_payload = 0`, "max_payload: must be above zero"},
		{`log_level = "loud"`, `log_level: "loud": want debug, info, warn or error`},
		{`lisen = "0.0.0.0:7400"`, `unknown key "lisen" (did you mean "listen"?)`},
		{`colour = "blue"`, `unknown key "colour"`},
		{`listen = "127.0.0.1:1"`, "Attribute redefined"},
		{`wan = "0.0.0.0:${port}"`, "Variables not allowed"},
		{`gossip_key_file = "/nonexistent/key"`, "gossip_key_file: cannot read"},
	}
	var src []string
	for _, l := range lines {
		src = append(src, l.src)
	}
	_, err := Parse("bad.hcl", []byte(strings.Join(src, "\n")+"\nretention {\n}\n"))
	var cerr *Error
	if !errors.As(err, &cerr) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("got %v, want an *Error", err)
	}
	got := make(map[int][]string)
	for _, p := range cerr.Problems {
		if p.Pos.File != "bad.hcl" {
			t.Errorf("problem in file %q: %v", p.Pos.File, p)
		}
		got[p.Pos.Line] = append(got[p.Pos.Line], p.Msg)
	}
	for i, l := range lines {
		msgs := strings.Join(got[i+1], " | ")
		if l.want == "" {
			if msgs != "" {
				t.Errorf("line %d %s: unexpected %s", i+1, l.src, msgs)
			}
			continue
		}
		if !strings.Contains(msgs, l.want) {
			t.Errorf("line %d %s: got %q, want %q", i+1, l.src, msgs, l.want)
		}
	}
	if msgs := strings.Join(got[len(lines)+1], " "); !strings.Contains(msgs, "Unexpected \"retention\" block") {
		t.Errorf("block: got %q", msgs)
	}
	for i := 1; i < len(cerr.Problems); i++ {
		if cerr.Problems[i].Pos.Line < cerr.Problems[i-1].Pos.Line {
			t.Fatalf("problems not in file order: %v", cerr)
		}
	}
	if !strings.HasPrefix(err.Error(), "bad.hcl:1:8: data: must not be empty\n") {
		t.Errorf("error text starts %q", strings.SplitN(err.Error(), "\n", 2)[0])
	}
}

func TestCrossChecks(t *testing.T) {
	keyFile := writeFile(t, "k", "not a key")
	src := "wan = \"a:1\"\nwan_join = [\"b:2\"]\njoin = [\"c:3\"]\ngossip_key = \"" + key32 + "\"\ngossip_key_file = \"" + keyFile + "\"\n"
	_, err := Parse("x.hcl", []byte(src))
	for _, want := range []string{
		"x.hcl:1:1: wan needs gossip", "x.hcl:3:1: join needs gossip",
		"x.hcl:5:19: gossip_key_file: " + keyFile + ": want the base64 of 32 bytes",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "wan_join needs wan") {
		t.Errorf("wan_join reported though wan is set: %v", err)
	}
	good := writeFile(t, "k2", key32)
	_, err = Parse("y.hcl", []byte("gossip = \"a:1\"\ngossip_key = \""+key32+"\"\ngossip_key_file = \""+good+"\"\n"))
	if err == nil || !strings.Contains(err.Error(), "set one of them") {
		t.Errorf("both keys: %v", err)
	}
}

func TestSyntaxErrors(t *testing.T) {
	_, err := Parse("s.hcl", []byte("data = \"/d\"\nlisten = \n\nregion = \"eu\"\n"))
	if err == nil || !strings.Contains(err.Error(), "s.hcl:2:") {
		t.Fatalf("got %v", err)
	}
	if _, err := Parse("n.hcl", []byte("max_payload = 1.5\nretention_bytes = \"10G\"\nmax_payload = 1")); err == nil ||
		!strings.Contains(err.Error(), "n.hcl:1:15: max_payload: want a whole number, got 1.5") ||
		!strings.Contains(err.Error(), "n.hcl:2:19: retention_bytes: want a whole number, got string") {
		t.Errorf("numbers: %v", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.hcl")); err == nil || errors.Is(err, ErrInvalid) {
		t.Errorf("missing file: %v", err)
	}
	f := &File{Path: "e.hcl"}
	if err := f.Require("data"); err == nil || err.Error() != "e.hcl:1:1: data: required, and not set" {
		t.Errorf("Require: %v", err)
	}
}

func TestKeys(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range Keys {
		if seen[k.Name] || strings.ReplaceAll(k.Name, "_", "-") != k.Flag || k.Doc == "" {
			t.Errorf("key %+v: duplicate, or flag not the name with '-'", k)
		}
		seen[k.Name] = true
	}
	if k, _ := KeyByName("wan_join"); k.Env() != "QUICMQ_WAN_JOIN" {
		t.Errorf("env %q", k.Env())
	}
}
