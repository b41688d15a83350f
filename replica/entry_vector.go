package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Portable positions in entries (entry.go's layout): a set position's body layout 2 and a
// mirror position carry the position's vector, stored as wal.Log.SetPosition stores it (a
// v3 position), so every replica holds what the local path would.

// maxEntryVector bounds a position's vector: wal's stored v3 layout holds at most as many
// (wal's maxVector).
const maxEntryVector = 256

// validateVector reports what makes a position's vector impossible to store.
func validateVector(v map[string]uint64) []error {
	var errs []error
	if len(v) > maxEntryVector {
		errs = append(errs, fmt.Errorf("position vector of %d regions, at most %d", len(v), maxEntryVector))
	}
	for r := range v {
		switch {
		case r == "":
			errs = append(errs, errors.New("position vector with an empty region"))
		case len(r) > maxEntryStrBytes:
			errs = append(errs, fmt.Errorf("position vector region of %d bytes, at most %d", len(r), maxEntryStrBytes))
		}
	}
	return errs
}

// appendPosVector appends a position body's vector: nothing for none (layout 1), else
// layout 2.
func appendPosVector(dst []byte, v map[string]uint64) []byte {
	if len(v) == 0 {
		return dst
	}
	dst = append(dst, posLayoutVector)
	dst = binary.AppendUvarint(dst, uint64(len(v)))
	for _, r := range slices.Sorted(maps.Keys(v)) {
		dst = appendStr(dst, r)
		dst = binary.AppendUvarint(dst, v[r])
	}
	return dst
}

// posVector reads a position body's vector after its value: none when the body ends there
// (layout 1, refused when required), else layout 2.
func (d *entryDecoder) posVector(required bool) map[string]uint64 {
	if d.bad != "" {
		return nil
	}
	if len(d.b) == 0 {
		if required {
			d.fail("position without its vector")
		}
		return nil
	}
	if layout := d.byte(); layout > posLayoutVector {
		d.failNewer(fmt.Sprintf("position layout %d (this build knows up to %d)", layout, posLayoutVector))
		return nil
	} else if layout != posLayoutVector {
		d.fail(fmt.Sprintf("unknown position layout %d", layout))
		return nil
	}
	n := d.uvarint()
	// An origin takes at least three bytes (length, one byte of name, offset).
	if d.bad == "" && (n == 0 || n > maxEntryVector || n > uint64(len(d.b))/3) {
		d.fail("bad position vector count")
		return nil
	}
	v := make(map[string]uint64, n)
	prev := ""
	for i := range n {
		r, off := d.str(), d.uvarint()
		if d.bad != "" {
			return nil
		}
		if r == "" || (i > 0 && r <= prev) {
			d.fail("position vector regions empty, out of order or twice")
			return nil
		}
		prev = r
		v[r] = off
	}
	return v
}
