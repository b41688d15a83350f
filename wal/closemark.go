package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
)

// closeMarkFile is written into the log's directory by every clean Close: each
// topic's high-watermark at that moment, with a CRC. It exists because Pebble
// cannot tell two things apart at recovery: a torn write at the end of its last
// WAL (an append that was never acknowledged: dropping it is right) and a bit
// flip or truncation that damaged the WAL's last, synced, acknowledged batch
// (dropping it loses acknowledged records). Pebble drops both. After a clean
// Close every high-watermark is durable, so a log that later opens with a topic
// ending before its marked high-watermark has lost acknowledged records, and
// Open refuses it with a *CorruptError.
//
// The marker is never removed: offsets only grow, so an old marker stays a
// valid lower bound after later appends and a crash. After a crash (no fresh
// marker) a torn tail past the last marker is accepted, as Pebble accepts it;
// that tail can only hold records acknowledged since the last clean Close,
// which the power-loss campaign shows Pebble keeps.
const closeMarkFile = "QUICMQ-CLOSED"

const closeMarkMagic = "qmqclosed1"

// encodeCloseMark is magic | count uvarint | (name len uvarint | name | next
// u64 LE)* | crc32c u32 LE over everything before it.
func encodeCloseMark(marks map[string]uint64) []byte {
	b := []byte(closeMarkMagic)
	b = binary.AppendUvarint(b, uint64(len(marks)))
	for name, next := range marks {
		b = binary.AppendUvarint(b, uint64(len(name)))
		b = append(b, name...)
		b = binary.LittleEndian.AppendUint64(b, next)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

var errBadCloseMark = errors.New("malformed")

func decodeCloseMark(b []byte) (map[string]uint64, error) {
	if len(b) < len(closeMarkMagic)+4 || string(b[:len(closeMarkMagic)]) != closeMarkMagic {
		return nil, errBadCloseMark
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return nil, fmt.Errorf("%w: checksum mismatch", errBadCloseMark)
	}
	p := body[len(closeMarkMagic):]
	count, n := binary.Uvarint(p)
	if n <= 0 || count > uint64(len(p)) {
		return nil, errBadCloseMark
	}
	p = p[n:]
	marks := make(map[string]uint64, count)
	for range count {
		l, n := binary.Uvarint(p)
		if n <= 0 || l > MaxNameLen || uint64(len(p)-n) < l+8 {
			return nil, errBadCloseMark
		}
		name := string(p[n : n+int(l)])
		p = p[n+int(l):]
		marks[name] = binary.LittleEndian.Uint64(p)
		p = p[8:]
	}
	if len(p) != 0 {
		return nil, errBadCloseMark
	}
	return marks, nil
}

// writeCloseMark replaces the marker atomically: a temporary file, synced,
// renamed over the old one, the directory synced.
func (l *Log) writeCloseMark() error {
	l.mu.RLock()
	marks := make(map[string]uint64, len(l.mu.topics))
	for name, t := range l.mu.topics {
		marks[name] = t.hwm
	}
	l.mu.RUnlock()
	return l.writeCloseMarks(marks)
}

func (l *Log) writeCloseMarks(marks map[string]uint64) error {
	fsys, dir := l.opts.FS, l.dir
	path, tmp := fsys.PathJoin(dir, closeMarkFile), fsys.PathJoin(dir, closeMarkFile+".tmp")
	f, err := fsys.Create(tmp, "")
	if err != nil {
		return err
	}
	if _, err := f.Write(encodeCloseMark(marks)); err != nil {
		f.Close()
		return err
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		return err
	}
	if err := fsys.Rename(tmp, path); err != nil {
		return err
	}
	d, err := fsys.OpenDir(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// dropCloseMark removes topic name from the marker, if it is there, before
// the topic's delete is applied: otherwise the next Open after a crash would
// take the deleted topic for lost records. Removing an entry only weakens the
// check for that topic, so a crash before the delete is durable is safe. The
// committer calls it (deletes are serialized there).
func (l *Log) dropCloseMark(name string) error {
	marks, err := l.readCloseMark()
	if err != nil || marks == nil {
		return err
	}
	if _, ok := marks[name]; !ok {
		return nil
	}
	delete(marks, name)
	return l.writeCloseMarks(marks)
}

// readCloseMark returns the marker's high-watermarks, nil without a marker.
func (l *Log) readCloseMark() (map[string]uint64, error) {
	f, err := l.opts.FS.Open(l.opts.FS.PathJoin(l.dir, closeMarkFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("wal: open %s: %w", closeMarkFile, err)
	}
	b, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("wal: read %s: %w", closeMarkFile, err)
	}
	marks, err := decodeCloseMark(b)
	if err != nil {
		return nil, &CorruptError{Reason: fmt.Sprintf("%s (the high-watermarks of the last clean close): %v", closeMarkFile, err)}
	}
	return marks, nil
}

// checkCloseMark compares the recovered logs with the last clean Close's
// high-watermarks. It runs in Open, after recover.
func (l *Log) checkCloseMark() error {
	marks, err := l.readCloseMark()
	if err != nil {
		return err
	}
	for name, next := range marks {
		t := l.mu.topics[name]
		switch {
		case t == nil && next > 0:
			return &CorruptError{Topic: name, Reason: fmt.Sprintf("topic missing, but the last clean close left it at offset %d: acknowledged records lost (damaged WAL or sstable?)", next)}
		case t != nil && t.hwm < next:
			return &CorruptError{Topic: name, Offset: t.hwm, Reason: fmt.Sprintf("log ends here, but the last clean close left it at offset %d: acknowledged records lost (damaged WAL or sstable?)", next)}
		}
	}
	return nil
}
