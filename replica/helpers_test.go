package replica

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// openTestDB opens a Pebble DB on fs (a fresh in-memory FS when nil),
// closed by t.Cleanup unless the test closes it first.
func openTestDB(t testing.TB, fs vfs.FS) *pebble.DB {
	t.Helper()
	if fs == nil {
		fs = vfs.NewMem()
	}
	db, err := pebble.Open("db", &pebble.Options{FS: fs, FormatMajorVersion: pebble.FormatNewest, Logger: quietLogger{}})
	if err != nil {
		t.Fatalf("open pebble: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic("pebble fatal: " + format)
}
