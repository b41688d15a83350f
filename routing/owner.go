package routing

// Owner picks the member that owns topic's log, by rendezvous (highest random
// weight) hashing: every member gets a pseudo-random weight for the topic and the
// heaviest wins. It is deterministic and independent of the order of members, so
// every node of a region computes the same owner from the same member list. Adding
// a member moves only the topics it now wins, to itself; removing one moves only
// its own topics. Empty names are ignored; with no members Owner returns "".
//
// The hash is fixed (FNV-1a finished with a 64-bit mixer), not seeded per process:
// nodes of different builds and runs must agree.
func Owner(topic string, members []string) string {
	var best string
	var bestW uint64
	for _, m := range members {
		if m == "" {
			continue
		}
		w := weight(m, topic)
		if best == "" || w > bestW || (w == bestW && m < best) {
			best, bestW = m, w
		}
	}
	return best
}

// weight hashes member, a 0xff separator (a byte no topic contains, so the pair is
// encoded unambiguously) and topic.
func weight(member, topic string) uint64 {
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for i := 0; i < len(member); i++ {
		h = (h ^ uint64(member[i])) * prime64
	}
	h = (h ^ 0xff) * prime64
	for i := 0; i < len(topic); i++ {
		h = (h ^ uint64(topic[i])) * prime64
	}
	// splitmix64 finalizer: FNV's low-order avalanche is weak for short inputs that
	// differ only at the end, such as "node-1" and "node-2".
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}
