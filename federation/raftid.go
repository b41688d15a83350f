package federation

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// raftIDFile is the file in a node's data directory that holds its raft node ID.
const raftIDFile = "raft-id"

// RaftNodeID returns the node's raft node ID, kept in dataDir/raft-id: drawn at random (64
// bits, never 0) the first time and written durably (file and directory synced) before it is
// returned, then read back on every start. The ID lives with the data it names: a node
// whose data directory is lost comes back with a new ID, never its old one, since raft
// requires that IDs are never reused (a replica that forgot what it acknowledged must not
// vote under its old name: I8).
func RaftNodeID(dataDir string) (uint64, error) {
	path := filepath.Join(dataDir, raftIDFile)
	b, err := os.ReadFile(path)
	if err == nil {
		id, perr := strconv.ParseUint(strings.TrimSpace(string(b)), 16, 64)
		if perr != nil || id == 0 {
			return 0, fmt.Errorf("federation: raft node ID: %s holds %q, not a non-zero hexadecimal ID", path, strings.TrimSpace(string(b)))
		}
		return id, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("federation: raft node ID: %w", err)
	}
	var id uint64
	for id == 0 {
		var r [8]byte
		if _, err := rand.Read(r[:]); err != nil {
			return 0, fmt.Errorf("federation: raft node ID: %w", err)
		}
		id = binary.BigEndian.Uint64(r[:])
	}
	if err := writeSynced(dataDir, raftIDFile, fmt.Sprintf("%016x\n", id)); err != nil {
		return 0, fmt.Errorf("federation: raft node ID: %w", err)
	}
	return id, nil
}

// writeSynced writes name in dir through a synced temporary file renamed into place, then
// syncs dir, so that a crash leaves either no file or the whole one.
func writeSynced(dir, name, content string) error {
	tmp, err := os.CreateTemp(dir, name+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(content); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
