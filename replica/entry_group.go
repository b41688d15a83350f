package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/quicmq/quicmq/wal"
)

// The set group entry (entry.go's layout): a consumer group's state of one
// topic as replicated state (I10), written at apply under wal's group keys.

// validate reports what makes g impossible to store.
func (g *GroupOp) validate() []error {
	if g == nil {
		return nil
	}
	var errs []error
	if g.Remove && (g.Settings != nil || g.State != nil) {
		errs = append(errs, errors.New("a group removal that also stores settings or state"))
	}
	if s := g.Settings; s != nil {
		switch {
		case s.Pattern == "":
			errs = append(errs, errors.New("group settings with an empty pattern"))
		case len(s.Pattern) > maxEntryStrBytes:
			errs = append(errs, fmt.Errorf("group pattern of %d bytes, at most %d", len(s.Pattern), maxEntryStrBytes))
		}
		if len(s.DeadLetter) > maxEntryStrBytes {
			errs = append(errs, fmt.Errorf("dead-letter topic of %d bytes, at most %d", len(s.DeadLetter), maxEntryStrBytes))
		}
		if s.AckWait < 0 {
			errs = append(errs, fmt.Errorf("negative group ack-wait %v", s.AckWait))
		}
		if s.Order > maxGroupOrder {
			errs = append(errs, fmt.Errorf("unknown group order %d", s.Order))
		}
	}
	if st := g.State; st != nil {
		if st.Next < st.Floor {
			errs = append(errs, fmt.Errorf("group state with next offset %d below its floor %d", st.Next, st.Floor))
		}
		for i, e := range st.Entries {
			if e.Offset < st.Floor || e.Offset >= st.Next || (i > 0 && e.Offset <= st.Entries[i-1].Offset) {
				errs = append(errs, fmt.Errorf("group state entry %d (offset %d): not ascending within [%d, %d)", i, e.Offset, st.Floor, st.Next))
				break
			}
		}
		if st.Vector != nil {
			if err := wal.CheckGroupVector(st); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs
}

// validateMirrored reports what makes g impossible to store as a mirror group's state.
func (g *GroupOp) validateMirrored() []error {
	switch {
	case g == nil || g.State == nil || g.Settings != nil || g.Remove:
		return []error{errors.New("a mirror group must carry a state alone")}
	case g.State.Vector == nil:
		return []error{errors.New("a mirror group's state without a vector")}
	case g.State.Updated.IsZero() || g.State.Updated.UnixNano() <= 0:
		return []error{errors.New("a mirror group's state without its origin's time")}
	}
	return g.validate()
}

// append encodes g (nil: a barrier) after the group's name.
func (g *GroupOp) append(dst []byte) []byte {
	var flags byte
	if g != nil {
		if g.Settings != nil {
			flags |= groupFlagSettings
		}
		if g.State != nil {
			flags |= groupFlagState
		}
		if g.Remove {
			flags |= groupFlagRemove
		}
	}
	layout := byte(groupLayout)
	if flags&groupFlagState != 0 && g.State.Vector != nil {
		layout = groupLayoutVector
	}
	dst = append(dst, layout, flags)
	if flags&groupFlagSettings != 0 {
		s := g.Settings
		dst = appendStr(dst, s.Pattern)
		dst = binary.AppendUvarint(dst, uint64(s.AckWait))
		dst = binary.AppendUvarint(dst, s.MaxDeliver)
		dst = appendStr(dst, s.DeadLetter)
		dst = append(dst, s.Order)
	}
	if flags&groupFlagState != 0 {
		st := g.State
		dst = binary.AppendUvarint(dst, st.Floor)
		dst = binary.AppendUvarint(dst, st.Next)
		dst = binary.AppendUvarint(dst, uint64(len(st.Entries)))
		for _, e := range st.Entries {
			dst = binary.AppendUvarint(dst, e.Offset-st.Floor)
			dst = binary.AppendUvarint(dst, uint64(e.Deliveries))
		}
		if layout == groupLayoutVector {
			dst = appendBytes(dst, wal.AppendGroupVector(nil, st))
		}
	}
	return dst
}

// groupOp decodes a set group's body after its name; a problem sticks in
// d.bad. Validate checks the order of the entries afterwards.
func (d *entryDecoder) groupOp() *GroupOp {
	g := &GroupOp{}
	layout := d.byte()
	if d.bad == "" && layout > groupLayoutVector {
		d.failNewer(fmt.Sprintf("group layout %d (this build knows up to %d)", layout, groupLayoutVector))
		return g
	}
	if d.bad == "" && layout != groupLayout && layout != groupLayoutVector {
		d.fail(fmt.Sprintf("unknown group layout %d", layout))
		return g
	}
	flags := d.byte()
	if d.bad == "" && flags&^knownGroupFlags != 0 {
		d.fail("unknown group flags")
		return g
	}
	if d.bad == "" && layout == groupLayoutVector && flags&groupFlagState == 0 {
		d.fail("group layout 2 (a vector) without a state")
		return g
	}
	g.Remove = flags&groupFlagRemove != 0
	if flags&groupFlagSettings != 0 {
		s := &wal.GroupSettings{Pattern: d.str()}
		ackWait := d.uvarint()
		if ackWait > math.MaxInt64 {
			d.fail("group ack-wait past the largest duration")
		}
		s.AckWait = time.Duration(ackWait)
		s.MaxDeliver = d.uvarint()
		s.DeadLetter = d.str()
		s.Order = d.byte()
		g.Settings = s
	}
	if flags&groupFlagState != 0 {
		st := &wal.GroupState{Floor: d.uvarint(), Next: d.uvarint()}
		n := d.uvarint()
		// An entry takes at least two bytes: bound the allocation by what the
		// entry holds.
		if n > uint64(len(d.b))/2 {
			d.fail("group state entry count past the end")
		}
		if d.bad == "" && n > 0 {
			st.Entries = make([]wal.GroupEntry, n)
		}
		for i := range st.Entries {
			off, dv := d.uvarint(), d.uvarint()
			if d.bad != "" {
				break
			}
			if dv > math.MaxUint32 || off > math.MaxUint64-st.Floor {
				d.fail("group state entry out of range")
				break
			}
			st.Entries[i] = wal.GroupEntry{Offset: st.Floor + off, Deliveries: uint32(dv)}
		}
		if layout == groupLayoutVector {
			vb := d.raw(uint64(len(d.b)))
			if d.bad == "" {
				v, err := wal.DecodeGroupVector(vb, st.Entries)
				if err != nil {
					d.fail(err.Error())
				}
				st.Vector = v
			}
		}
		g.State = st
	}
	return g
}
