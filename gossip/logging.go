package gossip

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"sync/atomic"
)

// slogWriter turns serf's and memberlist's log lines ("[WARN] memberlist: ...") into slog
// records at the matching level. log.Logger serializes calls to Write.
type slogWriter struct {
	log *slog.Logger
	// leaving is set when this node starts a deliberate leave (Close, or Run's context
	// ending): from then on the warnings that leaving itself causes are logged at INFO.
	leaving *atomic.Bool
}

func newStdLogger(l *slog.Logger, leaving *atomic.Bool) *log.Logger {
	return log.New(slogWriter{log: l, leaving: leaving}, "", 0)
}

var levelPrefixes = []struct {
	prefix string
	level  slog.Level
}{
	{"[DEBUG] ", slog.LevelDebug},
	{"[TRACE] ", slog.LevelDebug},
	{"[INFO] ", slog.LevelInfo},
	{"[WARN] ", slog.LevelWarn},
	{"[ERR] ", slog.LevelError},
	{"[ERROR] ", slog.LevelError},
}

// leaveNoise are fragments of the warnings serf and memberlist log because this node is
// leaving or shutting down on purpose: its leave broadcast timing out when the peers are
// stopping too (a whole dev mesh stopping), its sockets closed under its own goroutines, and
// peers that stopped first not answering its last probes. Only while leaving are they lowered
// to INFO; at any other time the same lines are real warnings. A line that matches none (a
// key mismatch, a decode error) keeps its level even while leaving.
var leaveNoise = [][]byte{
	[]byte("graceful leave"),
	[]byte("leave broadcast"),
	[]byte("use of closed network connection"),
	[]byte("connection refused"),
	[]byte("connection reset"),
	[]byte("i/o timeout"),
	[]byte("Failed fallback TCP ping"),
	[]byte("Failed to send"),
	[]byte("shutdown"),
	[]byte("EOF"),
}

func (w slogWriter) Write(p []byte) (int, error) {
	n := len(p)
	p = bytes.TrimRight(p, "\n")
	level := slog.LevelInfo
	for _, lp := range levelPrefixes {
		if bytes.HasPrefix(p, []byte(lp.prefix)) {
			level, p = lp.level, p[len(lp.prefix):]
			break
		}
	}
	if level >= slog.LevelWarn && w.leaving != nil && w.leaving.Load() && isLeaveNoise(p) {
		level = slog.LevelInfo
	}
	ctx := context.Background()
	if w.log.Enabled(ctx, level) {
		w.log.Log(ctx, level, string(p))
	}
	return n, nil
}

func isLeaveNoise(line []byte) bool {
	for _, frag := range leaveNoise {
		if bytes.Contains(line, frag) {
			return true
		}
	}
	return false
}
