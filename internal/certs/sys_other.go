//go:build !unix

package certs

import "sync"

// lockMu stands in for flock where there is none: it serializes this process only.
var lockMu sync.Mutex

func lockDir(string) (func(), error) {
	lockMu.Lock()
	return lockMu.Unlock, nil
}

// syncDir is a no-op where directories cannot be synced (Windows): the rename is
// left to the OS.
func syncDir(string) error { return nil }
