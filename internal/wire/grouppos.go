package wire

// TypeGroupPosition is the frame by which a serving node mirrors a consumer group's portable
// position on a mirror stream (node to node, between records, like POSITION).
const TypeGroupPosition Type = 0x44

// MaxGroupOutstanding bounds the outstanding records of one GROUP_POSITION.
const MaxGroupOutstanding = 1 << 16

// GroupPosition is a consumer group's vector position on the mirror stream's topic, as the
// serving node stored it: the group's name (with its tenant's namespace), when the serving
// node stored it (unix nanoseconds, its clock), per origin region the last origin offset the
// group handed out (Through), and the records it handed out and has not acknowledged
// (Outstanding, each at or below its region's Through). What the group has done is every record
// of an origin up to its Through except the outstanding ones.
type GroupPosition struct {
	Group       string
	Time        int64
	Through     []OriginOffset
	Outstanding []OriginOffset
}

func (*GroupPosition) Type() Type { return TypeGroupPosition }

func (f *GroupPosition) appendBody(e enc) enc {
	e = e.str(f.Group).uvarint(uint64(f.Time)).uvarint(uint64(len(f.Through)))
	index := make(map[string]uint64, len(f.Through))
	for i, o := range f.Through {
		index[o.Region] = uint64(i)
		e = e.str(o.Region).uvarint(o.Offset)
	}
	e = e.uvarint(uint64(len(f.Outstanding)))
	for _, o := range f.Outstanding {
		e = e.uvarint(index[o.Region]).uvarint(o.Offset)
	}
	return e
}

func (f *GroupPosition) decodeBody(d *dec) {
	f.Group = d.str("group")
	f.Time = int64(d.uvarint("time"))
	n := d.uvarint("origins")
	switch {
	case d.err != nil:
		return
	case f.Group == "":
		d.fail("empty group")
		return
	case n > MaxVectorOrigins:
		d.fail("%d origins over the limit of %d", n, MaxVectorOrigins)
		return
	case n*2 > uint64(len(d.b)):
		d.fail("%d origins exceed what %d bytes can hold", n, len(d.b))
		return
	}
	f.Through = make([]OriginOffset, 0, n)
	for range n {
		o := OriginOffset{Region: d.str("region"), Offset: d.uvarint("through")}
		if d.err == nil && o.Region == "" {
			d.fail("empty region")
		}
		for _, p := range f.Through {
			if d.err == nil && p.Region == o.Region {
				d.fail("region %q twice", o.Region)
			}
		}
		if d.err != nil {
			f.Through = nil
			return
		}
		f.Through = append(f.Through, o)
	}
	m := d.uvarint("outstanding")
	switch {
	case d.err != nil:
		return
	case m > MaxGroupOutstanding:
		d.fail("%d outstanding records over the limit of %d", m, MaxGroupOutstanding)
		return
	case m*2 > uint64(len(d.b)):
		d.fail("%d outstanding records exceed what %d bytes can hold", m, len(d.b))
		return
	}
	f.Outstanding = make([]OriginOffset, 0, m)
	seen := make(map[OriginOffset]bool, m)
	for range m {
		i, off := d.uvarint("origin index"), d.uvarint("origin offset")
		switch {
		case d.err != nil:
		case i >= uint64(len(f.Through)):
			d.fail("outstanding record's origin index %d of %d origins", i, len(f.Through))
		case off > f.Through[i].Offset:
			d.fail("outstanding record %s@%d past its origin's %d", f.Through[i].Region, off, f.Through[i].Offset)
		case seen[OriginOffset{f.Through[i].Region, off}]:
			d.fail("outstanding record %s@%d twice", f.Through[i].Region, off)
		}
		if d.err != nil {
			f.Outstanding = nil
			return
		}
		o := OriginOffset{Region: f.Through[i].Region, Offset: off}
		seen[o] = true
		f.Outstanding = append(f.Outstanding, o)
	}
}
