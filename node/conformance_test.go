package node

// The conformance suite: recorded exchanges of each protocol version a node speaks, in
// testdata/conformance/vN/*.txt, replayed against a live node. The frames are written from
// docs/protocol.md, not produced by internal/wire: this file encodes and matches them with a
// few lines of its own (LEB128 varints, the 5-byte frame header), as a client written from
// the document would. A change that breaks what a documented version sends fails here.
//
// A script is a list of lines; # starts a comment.
//
//	stream NAME        open a new stream (the first one opened is the control stream)
//	> FRAME FIELDS     send a frame on the current stream
//	< FRAME FIELDS     the next frame the node sends on it must match
//	fin                close the sending side of the current stream
//	< FIN              the node closed its side: nothing more comes on the stream
//
// FRAME is a frame name of protocol.md's table. FIELDS encode the body in order:
//
//	u:N      a varint of value N          u:*      (in <) any varint
//	s:"txt"  a string (varint length)     s:*      (in <) any string
//	x:HEX    raw bytes                    b:N      one byte
//
// A node named "conf" of region "conf", with the default limits, runs each script.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// confFrames are the frame types of docs/protocol.md's table.
var confFrames = map[string]byte{
	"HELLO": 0x01, "WELCOME": 0x02, "ERROR": 0x03,
	"PUBLISH": 0x10, "PUBLISH_ACK": 0x11, "PUBLISH_ERROR": 0x12, "PUBLISH_BATCH": 0x13, "PUBLISH_ACKS": 0x14, "PUBLISH_OPEN": 0x15, "PUBLISH_MULTI": 0x16,
	"SUBSCRIBE": 0x20, "SUBSCRIBED": 0x21, "TOPIC": 0x22, "RECORD": 0x23, "ACK": 0x24, "GAP": 0x25, "RECORDS": 0x26, "RUNS": 0x2b,
	"CAUGHT_UP": 0x27, "COMMIT": 0x29, "COMMITTED": 0x2a,
	"TOPICS": 0x30, "TOPIC_INFO": 0x31,
	"CONSUMERS": 0x50, "CONSUMER_INFO": 0x51, "TOPIC_CREATE": 0x54, "TOPIC_REMOVE": 0x55, "DONE": 0x56,
}

func TestConformance(t *testing.T) {
	scripts, err := filepath.Glob("testdata/conformance/v*/*.txt")
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no conformance scripts: %v", err)
	}
	for _, path := range scripts {
		t.Run(strings.TrimSuffix(strings.TrimPrefix(path, "testdata/conformance/"), ".txt"), func(t *testing.T) {
			runConformance(t, path)
		})
	}
}

func runConformance(t *testing.T, path string) {
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := newTestNode(t, func(c *Config) { c.Name, c.Region = "conf", "conf" })
	rc := confDial(t, n)
	streams := map[string]*confStream{}
	var cur *confStream
	sc := bufio.NewScanner(bytes.NewReader(src))
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if i := strings.Index(text, " #"); i >= 0 {
			text = strings.TrimSpace(text[:i])
		}
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		where := fmt.Sprintf("%s:%d: %s", path, line, text)
		verb, rest, _ := strings.Cut(text, " ")
		switch {
		case verb == "stream":
			str, err := rc.OpenStreamSync(context.Background())
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			cur = &confStream{str: str}
			streams[rest] = cur
		case cur == nil:
			t.Fatalf("%s: no stream open", where)
		case verb == "fin":
			cur.str.Close()
		case verb == ">":
			typ, fields, err := confBody(rest, false)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			body := fields[0].raw
			frame := append([]byte{typ}, binary.BigEndian.AppendUint32(nil, uint32(len(body)))...)
			if _, err := cur.str.Write(append(frame, body...)); err != nil {
				t.Fatalf("%s: write: %v", where, err)
			}
		case verb == "<" && rest == "FIN":
			if typ, body, err := cur.read(); !errors.Is(err, io.EOF) {
				t.Fatalf("%s: got frame 0x%02x %x (%v), want the node's FIN", where, typ, body, err)
			}
		case verb == "<":
			want, pattern, err := confBody(rest, true)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			typ, body, err := cur.read()
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			if typ != want {
				t.Fatalf("%s: got frame type 0x%02x (body %x %q), want 0x%02x", where, typ, body, body, want)
			}
			if err := confMatch(pattern, body); err != nil {
				t.Fatalf("%s: body %x: %v", where, body, err)
			}
		default:
			t.Fatalf("%s: unknown line", where)
		}
	}
}

// confDial makes the QUIC connection a script speaks over: TLS 1.3, ALPN quicmq/1, the
// node's CA, nothing of internal/wire.
func confDial(t *testing.T, n *Node) *quic.Conn {
	rc, err := dialRawConn(t, n, &quic.Config{KeepAlivePeriod: time.Second, MaxIncomingStreams: -1})
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

type confStream struct {
	str *quic.Stream
	buf []byte
}

// read reads one frame: the type byte, the 4-byte big-endian length, the body.
func (s *confStream) read() (byte, []byte, error) {
	s.str.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer s.str.SetReadDeadline(time.Time{})
	head := make([]byte, 5)
	if _, err := io.ReadFull(s.str, head); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, fmt.Errorf("a frame header cut short: %w", err)
		}
		return 0, nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(head[1:]))
	if _, err := io.ReadFull(s.str, body); err != nil {
		return 0, nil, fmt.Errorf("frame 0x%02x: body: %w", head[0], err)
	}
	return head[0], body, nil
}

// confField is one field of an expected body: bytes, or any varint or string.
type confField struct {
	raw       []byte
	anyVarint bool
	anyString bool
}

// confBody parses "FRAME FIELDS": the frame's type and its body (for a frame sent), or the
// fields to match (expected, where u:* and s:* are allowed).
func confBody(s string, expected bool) (byte, []confField, error) {
	name, rest, _ := strings.Cut(s, " ")
	typ, ok := confFrames[name]
	if !ok {
		return 0, nil, fmt.Errorf("unknown frame %q", name)
	}
	var fields []confField
	for rest = strings.TrimSpace(rest); rest != ""; rest = strings.TrimSpace(rest) {
		var tok string
		if strings.HasPrefix(rest, `s:"`) {
			end := strings.Index(rest[3:], `"`)
			if end < 0 {
				return 0, nil, fmt.Errorf("unterminated string in %q", rest)
			}
			tok, rest = rest[:end+4], rest[end+4:]
		} else {
			tok, rest, _ = strings.Cut(rest, " ")
		}
		kind, v, _ := strings.Cut(tok, ":")
		var f confField
		switch {
		case expected && tok == "u:*":
			f.anyVarint = true
		case expected && tok == "s:*":
			f.anyString = true
		case kind == "u":
			u, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return 0, nil, fmt.Errorf("field %q: %v", tok, err)
			}
			f.raw = binary.AppendUvarint(nil, u)
		case kind == "s":
			str := strings.TrimSuffix(strings.TrimPrefix(v, `"`), `"`)
			f.raw = append(binary.AppendUvarint(nil, uint64(len(str))), str...)
		case kind == "b":
			u, err := strconv.ParseUint(v, 10, 8)
			if err != nil {
				return 0, nil, fmt.Errorf("field %q: %v", tok, err)
			}
			f.raw = []byte{byte(u)}
		case kind == "x":
			b, err := hex.DecodeString(v)
			if err != nil {
				return 0, nil, fmt.Errorf("field %q: %v", tok, err)
			}
			f.raw = b
		default:
			return 0, nil, fmt.Errorf("field %q: want u:, s:, b: or x:", tok)
		}
		fields = append(fields, f)
	}
	if expected {
		return typ, fields, nil
	}
	var body []byte
	for _, f := range fields {
		body = append(body, f.raw...)
	}
	return typ, []confField{{raw: body}}, nil
}

// confMatch checks body against the expected fields, consumed exactly.
func confMatch(fields []confField, body []byte) error {
	for i, f := range fields {
		switch {
		case f.anyVarint:
			_, n := binary.Uvarint(body)
			if n <= 0 {
				return fmt.Errorf("field %d: no varint", i+1)
			}
			body = body[n:]
		case f.anyString:
			l, n := binary.Uvarint(body)
			if n <= 0 || uint64(len(body)-n) < l {
				return fmt.Errorf("field %d: no string", i+1)
			}
			body = body[n+int(l):]
		default:
			if !bytes.HasPrefix(body, f.raw) {
				return fmt.Errorf("field %d: want %x, got %x", i+1, f.raw, body[:min(len(body), len(f.raw))])
			}
			body = body[len(f.raw):]
		}
	}
	if len(body) > 0 {
		return fmt.Errorf("%d trailing bytes %x", len(body), body)
	}
	return nil
}
