package client

// chunks is a slice that grows by whole chunks once past its first. A stream's per-topic
// slices (topic names by index, entries of the delivered position, names waiting for the
// ACK map) reach one entry per topic of a wildcard, 100,000 and more, where append's growth
// by a quarter allocates and copies the whole about five times over on the way; chunks
// allocate each entry once and copy nothing. The first chunk grows as a slice does, so a
// stream of a few topics holds a few entries.
type chunks[T any] struct {
	c [][]T
	n int
}

// chunkLen is the length of every chunk but the first, which grows up to it.
const chunkLen = 4096

func (s *chunks[T]) len() int { return s.n }

func (s *chunks[T]) add(v T) {
	i := s.n / chunkLen
	if i == len(s.c) {
		var c []T
		if i > 0 {
			c = make([]T, 0, chunkLen)
		}
		s.c = append(s.c, c)
	}
	s.c[i] = append(s.c[i], v)
	s.n++
}

// at returns the entry i; 0 <= i < len().
func (s *chunks[T]) at(i int) *T { return &s.c[i/chunkLen][i%chunkLen] }

// each calls fn for every entry in order.
func (s *chunks[T]) each(fn func(*T)) {
	for _, c := range s.c {
		for i := range c {
			fn(&c[i])
		}
	}
}
