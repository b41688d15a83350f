package config

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParse: any bytes as a configuration file give settings or an *Error whose every
// problem has a position in the file; never a panic. Every accepted value passes its key's
// check again, and parsing is deterministic.
func FuzzParse(f *testing.F) {
	f.Add([]byte("data = \"/var/lib/quicmq\"\nlisten = \"0.0.0.0:7400\"\n"))
	f.Add([]byte("join = [\"10.0.0.1:7946\", 7]\nmax_payload = 1.5\n"))
	f.Add([]byte("anonymous = true\nretention_age = \"-3h\"\nregion = \"e u\"\n"))
	f.Add([]byte("{\n\"data\": \"/d\"}"))
	f.Add([]byte("mirror = [\"orders.>\", \"a..b\"]\nwan = \"x\"\nwan_join = []\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		file, err := Parse("f.hcl", src)
		again, err2 := Parse("f.hcl", src)
		if (err == nil) != (err2 == nil) {
			t.Fatalf("not deterministic: %v / %v", err, err2)
		}
		if err != nil {
			var cerr *Error
			if !errors.As(err, &cerr) || len(cerr.Problems) == 0 {
				t.Fatalf("error without problems: %v", err)
			}
			for _, p := range cerr.Problems {
				if p.Msg == "" || p.Pos.File != "f.hcl" {
					t.Fatalf("problem without message or file: %+v", p)
				}
			}
			return
		}
		if len(file.Settings) != len(again.Settings) {
			t.Fatalf("not deterministic: %d / %d settings", len(file.Settings), len(again.Settings))
		}
		for _, s := range file.Settings {
			if s.Pos.Line < 1 {
				t.Fatalf("setting %s without a line", s.Key.Name)
			}
			switch s.Key.Kind {
			case AddrList, Patterns, Tokens:
				for _, item := range strings.Split(s.Value, ",") {
					if item != "" {
						if msg := checkItem(s.Key.Kind, item); msg != "" {
							t.Fatalf("%s accepted %q: %s", s.Key.Name, item, msg)
						}
					}
				}
			case Size, Positive, Bool, TokenFile, KeyFile:
				// numbers and booleans are rendered by the parser; files are read by the check
			default:
				if msg := checkScalar(s.Key.Kind, s.Value); msg != "" {
					t.Fatalf("%s accepted %q: %s", s.Key.Name, s.Value, msg)
				}
			}
		}
	})
}

// FuzzParseCredentials: any token file gives credentials or problems naming their line,
// never a panic; every credential it returns is usable as it stands.
func FuzzParseCredentials(f *testing.F) {
	f.Add("0123456789abcdef0123\n")
	f.Add("# ops\n0123456789abcdef0123 tenant=acme publish=orders.> subscribe=-\ncert:svc tenant=b\n")
	f.Add("short\ncert: x=y\n0123456789abcdef0123 tenant=a.b publish=a..b\n0123456789abcdef0123\n")
	f.Fuzz(func(t *testing.T, text string) {
		creds, problems := ParseCredentials(text)
		for _, p := range problems {
			if !strings.HasPrefix(p, "line ") {
				t.Fatalf("problem without a line: %q", p)
			}
		}
		if len(problems) > 0 {
			return
		}
		for _, c := range creds {
			if (c.Token == "") == (c.Subject == "") {
				t.Fatalf("credential with neither or both of token and subject: %+v", c)
			}
			if c.Token != "" && checkToken(c.Token) != "" {
				t.Fatalf("bad token accepted: %q", c.Token)
			}
			if c.Tenant != "" && !tenantRE.MatchString(c.Tenant) {
				t.Fatalf("bad tenant accepted: %q", c.Tenant)
			}
		}
	})
}
