//go:build !quicmq_broken_topics

package replica

// crossTopics: see broken_topics.go.
const crossTopics = false
