package wal

// positionSet is the durable positions in memory (Log.mu.positions): by name, then by
// topic. Each name's topics are one map, so that a position costs one entry keyed by its
// topic alone: a mirroring node holds a cursor (mirror/REGION) per mirrored topic, and
// these maps' entries are what the GC scans for them at every cycle beside the hot topics'
// work (issue 34's figure 3). A map keyed by (name, topic) with a second index of the
// topics by name, as before, cost 203 B the GC scanned per cursor; this one, 116
// (TestPositionSetScansLessPerCursor). Callers hold Log.mu.
type positionSet map[string]map[string]posValue

func (s positionSet) get(k posName) (posValue, bool) {
	v, ok := s[k.name][k.topic]
	return v, ok
}

// has reports whether name holds a position on topic.
func (s positionSet) has(k posName) bool {
	_, ok := s[k.name][k.topic]
	return ok
}

func (s positionSet) set(k posName, v posValue) {
	ts := s[k.name]
	if ts == nil {
		ts = make(map[string]posValue)
		s[k.name] = ts
	}
	ts[k.topic] = v
}

// del removes a position, and its name once it has none left.
func (s positionSet) del(k posName) {
	ts := s[k.name]
	if ts == nil {
		return
	}
	delete(ts, k.topic)
	if len(ts) == 0 {
		delete(s, k.name)
	}
}

// count is how many positions the set holds.
func (s positionSet) count() int {
	n := 0
	for _, ts := range s {
		n += len(ts)
	}
	return n
}

// namesOn returns the names that hold a position on topic: a pass over the names, one
// lookup each.
func (s positionSet) namesOn(topic string) []string {
	var out []string
	for name, ts := range s {
		if _, ok := ts[topic]; ok {
			out = append(out, name)
		}
	}
	return out
}
