package gossip

import (
	"bytes"
	"context"
	"log"
	"log/slog"
)

// slogWriter turns serf's and memberlist's log lines ("[WARN] memberlist: ...") into slog
// records at the matching level. log.Logger serializes calls to Write.
type slogWriter struct {
	log *slog.Logger
}

func newStdLogger(l *slog.Logger) *log.Logger {
	return log.New(slogWriter{log: l}, "", 0)
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
	ctx := context.Background()
	if w.log.Enabled(ctx, level) {
		w.log.Log(ctx, level, string(p))
	}
	return n, nil
}
