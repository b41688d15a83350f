//go:build unix

package certs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

const lockFile = ".certs.lock"

// lockDir takes an exclusive flock on dir/.certs.lock and returns its release.
// flock locks belong to an open file, so this excludes other goroutines of this
// process as well as other processes, and the kernel drops the lock if the process
// dies.
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("certs: lock %s: %w", dir, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("certs: lock %s: %w", dir, err)
	}
	return func() { f.Close() }, nil // closing the file releases the lock
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
