package gossip

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	good := Config{Name: "n1", Region: "eu-west", LANAddr: "127.0.0.1:0"}
	if err := good.Validate(); err != nil {
		t.Fatalf("minimal config: %v", err)
	}
	full := good
	full.WANAddr, full.LANAddr = ":7947", "0.0.0.0:7946"
	full.AdvertiseLAN, full.AdvertiseWAN = "10.0.0.1:0", "203.0.113.5:17947"
	full.Key = make([]byte, KeySize)
	full.Tags = map[string]string{"quic": "10.0.0.1:4433"}
	full.Profile = ProfileLocal
	if err := full.Validate(); err != nil {
		t.Fatalf("full config: %v", err)
	}

	cases := []struct {
		name string
		mod  func(*Config)
		want []string // substrings of the error
	}{
		{"empty", func(c *Config) { *c = Config{} }, []string{"Name is required", "Region is required", "LANAddr is required"}},
		{"bad name", func(c *Config) { c.Name = "a b" }, []string{"Name \"a b\""}},
		{"long name", func(c *Config) { c.Name = strings.Repeat("n", 129) }, []string{"Name"}},
		{"bad region", func(c *Config) { c.Region = "eu.west" }, []string{"Region \"eu.west\""}},
		{"lan host", func(c *Config) { c.LANAddr = "localhost:1" }, []string{"LANAddr", "IP address"}},
		{"lan port", func(c *Config) { c.LANAddr = "127.0.0.1:70000" }, []string{"LANAddr", "bad port"}},
		{"lan no port", func(c *Config) { c.LANAddr = "127.0.0.1" }, []string{"LANAddr"}},
		{"same ports", func(c *Config) { c.LANAddr, c.WANAddr = ":7946", ":7946" }, []string{"same port"}},
		{"adv unspecified", func(c *Config) { c.AdvertiseLAN = "0.0.0.0:0" }, []string{"AdvertiseLAN", "specific IP"}},
		{"adv port with bind 0", func(c *Config) { c.AdvertiseLAN = "10.0.0.1:9000" }, []string{"AdvertiseLAN", "fixed bind port"}},
		{"adv wan without wan", func(c *Config) { c.AdvertiseWAN = "10.0.0.1:0" }, []string{"AdvertiseWAN is set but WANAddr is empty"}},
		{"short key", func(c *Config) { c.Key = make([]byte, 16) }, []string{"Key is 16 bytes, want 32"}},
		{"reserved tag", func(c *Config) { c.Tags = map[string]string{"role": "x", "region": "y"} }, []string{`"role"`, `"region"`}},
		{"big tags", func(c *Config) { c.Tags = map[string]string{"x": strings.Repeat("v", 500)} }, []string{"tags too large", "limit 512"}},
		{"profile", func(c *Config) { c.Profile = 7 }, []string{"unknown Profile 7"}},
		{"several at once", func(c *Config) { c.Name, c.Key, c.Profile = "", []byte{1}, -1 },
			[]string{"Name is required", "Key is 1 bytes", "unknown Profile -1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.mod(&c)
			err := c.Validate()
			if err == nil {
				t.Fatal("Validate accepted it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if _, nerr := New(c); nerr == nil || nerr.Error() != err.Error() {
				t.Errorf("New must refuse it with the same error: %v", nerr)
			}
		})
	}
	if err := (Config{Name: "n", Region: "r", LANAddr: ":0", Tags: map[string]string{"role": "x"}}).Validate(); !errors.Is(err, ErrReservedTag) {
		t.Fatalf("reserved tag error %v does not wrap ErrReservedTag", err)
	}
}

// TestEncodedTagsSizeMatchesSerf checks the package's size computation against serf's own
// limit check at exactly MaxTagsSize and one byte more, for tag sets that use the different
// msgpack header sizes (fix and 16-bit strings, fix and 16-bit maps).
func TestEncodedTagsSizeMatchesSerf(t *testing.T) {
	g, err := New(testNodeConfig(t, "a", "r1", nil, false))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()

	shapes := map[string]func(pad int) map[string]string{
		"one long value": func(pad int) map[string]string {
			return map[string]string{"quic": "127.0.0.1:4433", "pad": strings.Repeat("p", pad)}
		},
		"many short tags": func(pad int) map[string]string {
			m := map[string]string{"pad": strings.Repeat("p", pad)}
			for i := range 20 {
				m[fmt.Sprintf("k%02d", i)] = strings.Repeat("v", 10)
			}
			return m
		},
		"31-byte strings": func(pad int) map[string]string {
			m := map[string]string{"pad": strings.Repeat("p", pad)}
			for i := range 5 {
				m[fmt.Sprintf("%031d", i)] = strings.Repeat("v", 31)
			}
			return m
		},
	}
	for name, shape := range shapes {
		t.Run(name, func(t *testing.T) {
			cfg := g.cfg
			// Grow the pad until the encoded size reaches the limit exactly (pads of 32 bytes
			// and more have a 3-byte header, so every size from there on is reachable).
			pad := 32
			for ; pad < 1024; pad++ {
				tags, _ := cfg.fullTags(shape(pad))
				if encodedTagsSize(tags) >= MaxTagsSize {
					break
				}
			}
			at, _ := cfg.fullTags(shape(pad))
			if n := encodedTagsSize(at); n != MaxTagsSize {
				t.Fatalf("could not build a tag set of exactly %d bytes (got %d)", MaxTagsSize, n)
			}
			if err := g.lan.SetTags(at); err != nil {
				t.Fatalf("serf refused %d encoded bytes: %v", MaxTagsSize, err)
			}
			if err := g.SetTags(shape(pad)); err != nil {
				t.Fatalf("SetTags refused %d encoded bytes: %v", MaxTagsSize, err)
			}
			over, err := cfg.fullTags(shape(pad + 1))
			if !errors.Is(err, ErrTagsTooLarge) {
				t.Fatalf("one byte more: %v, want ErrTagsTooLarge", err)
			}
			if err := g.lan.SetTags(over); err == nil {
				t.Fatalf("serf accepted %d bytes by our count: the computation is off", encodedTagsSize(over))
			}
		})
	}
}

func TestLogBridgeLevels(t *testing.T) {
	var buf bytes.Buffer
	l := newStdLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})), nil)
	l.Printf("[DEBUG] memberlist: hidden")
	l.Printf("[INFO] serf: EventMemberJoin: a 127.0.0.1")
	l.Printf("[WARN] memberlist: was slow")
	l.Printf("[ERR] memberlist: failed")
	l.Printf("no prefix")
	out := buf.String()
	for _, want := range []string{
		`level=INFO msg="serf: EventMemberJoin: a 127.0.0.1"`,
		`level=WARN msg="memberlist: was slow"`,
		`level=ERROR msg="memberlist: failed"`,
		`level=INFO msg="no prefix"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log output lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hidden") {
		t.Errorf("debug line logged at info level:\n%s", out)
	}
}

// lockedBuffer is written by serf's goroutines and read by the test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestNoKeyWarns(t *testing.T) {
	var buf lockedBuffer
	cfg := testNodeConfig(t, "a", "r1", nil, false)
	cfg.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "no gossip key") {
		t.Fatalf("no warning about the missing key:\n%s", buf.String())
	}
}

// While this node leaves on purpose, the warnings its leave causes are logged at INFO; the
// same lines at any other time, and other warnings while leaving, keep their level.
func TestLogBridgeLowersDeliberateLeaveNoise(t *testing.T) {
	var buf bytes.Buffer
	var leaving atomic.Bool
	l := newStdLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})), &leaving)
	l.Printf("[WARN] serf: timeout waiting for leave broadcast: timeout waiting for leave broadcast")
	leaving.Store(true)
	l.Printf("[WARN] serf: timeout waiting for leave broadcast: timeout waiting for leave broadcast")
	l.Printf("[ERR] memberlist: Failed fallback TCP ping: dial tcp 127.0.0.1:1: connect: connection refused")
	l.Printf("[ERR] memberlist: failed to decrypt packet from 127.0.0.1:2")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{
		`level=WARN msg="serf: timeout waiting for leave broadcast`,
		`level=INFO msg="serf: timeout waiting for leave broadcast`,
		`level=INFO msg="memberlist: Failed fallback TCP ping`,
		`level=ERROR msg="memberlist: failed to decrypt packet`,
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d: %s, want %s", i, lines[i], w)
		}
	}
}

func TestLeaveTimeout(t *testing.T) {
	base := Config{Name: "n", Region: "r", LANAddr: "127.0.0.1:0"}
	for _, c := range []struct {
		profile Profile
		timeout time.Duration
		want    time.Duration
	}{
		{ProfileDefault, 0, 11 * time.Second},
		{ProfileLocal, 0, time.Second},
		{ProfileTest, 0, 2300 * time.Millisecond},
		{ProfileDefault, 500 * time.Millisecond, 500 * time.Millisecond},
		{ProfileTest, 5 * time.Second, 5 * time.Second},
	} {
		cfg := base
		cfg.Profile, cfg.LeaveTimeout = c.profile, c.timeout
		if got := cfg.leaveBound(); got != c.want {
			t.Errorf("%v, LeaveTimeout %v: leave bound %v, want %v", c.profile, c.timeout, got, c.want)
		}
	}
	cfg := base
	cfg.LeaveTimeout = -time.Second
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "LeaveTimeout must not be negative") {
		t.Errorf("negative LeaveTimeout: %v", err)
	}
}
